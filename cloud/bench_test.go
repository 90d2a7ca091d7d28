package cloud_test

import (
	"testing"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk"
	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
)

// BenchmarkDescribeENI compares one DescribeNetworkInterfaces through
// cloud.Client (fresh SDK client per attempt, limiter, classification,
// conversion) with the same call on a bare, reused SDK client. The ratio is
// the client's overhead against the simulator's HTTP round trip.
func BenchmarkDescribeENI(b *testing.B) {
	e := newBenchEnv(b)
	b.Run("client", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.c.ListENIs(e.ctx, cloud.ENIFilter{IDs: []string{e.inst.PrimaryENI}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bare-sdk", func(b *testing.B) {
		sc, err := ecs.NewClientWithOptions(ecssim.DefaultRegion, sdk.NewConfig(),
			credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret))
		if err != nil {
			b.Fatal(err)
		}
		sc.Domain = e.sim.Endpoint()
		for b.Loop() {
			req := ecs.CreateDescribeNetworkInterfacesRequest()
			req.NetworkInterfaceId = &[]string{e.inst.PrimaryENI}
			if _, err := sc.DescribeNetworkInterfaces(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
