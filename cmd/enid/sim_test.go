package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk"
	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
)

// TestSimBinary builds enid, runs "enid sim", reads its export lines and
// talks to the simulator with the real SDK and plain HTTP.
func TestSimBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "enid")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "sim", "--instance-type", "ecs.g7.large", "--attach-delay", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			cmd.Process.Kill() // the test failed before stopping it; the error is moot
			<-exited
		}
	})

	env := map[string]string{}
	sc := bufio.NewScanner(stdout)
	for len(env) < 5 && sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "export "); ok {
			k, v, _ := strings.Cut(rest, "=")
			env[k] = strings.Trim(v, "'")
		}
	}
	go io.Copy(io.Discard, stdout) // keep draining until the process ends
	for _, k := range []string{"ENID_ECS_ENDPOINT", "ENID_METADATA_ENDPOINT", "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_REGION_ID"} {
		if env[k] == "" {
			t.Fatalf("no export of %s in %v", k, env)
		}
	}

	resp, err := http.Get(env["ENID_METADATA_ENDPOINT"] + "/latest/meta-data/instance-id")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body) // a short read shows up in the comparison below
	resp.Body.Close()
	instanceID := string(b)
	if !strings.HasPrefix(instanceID, "i-") {
		t.Fatalf("metadata instance-id = %q", instanceID)
	}

	client, err := ecs.NewClientWithOptions(env["ALIBABA_CLOUD_REGION_ID"], sdk.NewConfig(),
		credentials.NewStaticAKCredentialsProvider(env["ALIBABA_CLOUD_ACCESS_KEY_ID"], env["ALIBABA_CLOUD_ACCESS_KEY_SECRET"]))
	if err != nil {
		t.Fatal(err)
	}
	client.Domain = env["ENID_ECS_ENDPOINT"]
	req := ecs.CreateDescribeNetworkInterfacesRequest()
	req.InstanceId = instanceID
	got, err := client.DescribeNetworkInterfaces(req)
	if err != nil {
		t.Fatalf("DescribeNetworkInterfaces: %v", err)
	}
	set := got.NetworkInterfaceSets.NetworkInterfaceSet
	if len(set) != 1 || set[0].Type != "Primary" || set[0].Status != "InUse" || set[0].InstanceId != instanceID {
		t.Fatalf("DescribeNetworkInterfaces: %+v", set)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		reaped = true
		if err != nil {
			t.Fatalf("enid sim exited with %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("enid sim did not exit after SIGTERM")
	}
}

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ecssim.Fault
		bad  bool
	}{
		{in: "AttachNetworkInterface=InternalError", want: ecssim.Fault{Action: "AttachNetworkInterface", Code: "InternalError", Count: 1}},
		{in: "*=Throttling.Userx3", want: ecssim.Fault{Code: "Throttling.User", Count: 3}},
		{in: "DescribeNetworkInterfaces=0.25", want: ecssim.Fault{Action: "DescribeNetworkInterfaces", Rate: 0.25}},
		{in: "X=InvalidOperation.Ipv4CountExceeded", want: ecssim.Fault{Action: "X", Code: "InvalidOperation.Ipv4CountExceeded", Count: 1}},
		{in: "X=InvalidOperation.Ipv4CountExceededx2", want: ecssim.Fault{Action: "X", Code: "InvalidOperation.Ipv4CountExceeded", Count: 2}},
		{in: "X=1.5", bad: true},
		{in: "X=Codex0", bad: true},
		{in: "=Code", bad: true},
		{in: "NoEquals", bad: true},
	} {
		got, err := parseFault(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("parseFault(%q) error %v, want error %v", tc.in, err, tc.bad)
			continue
		}
		if d := cmp.Diff(tc.want, got); !tc.bad && d != "" {
			t.Errorf("parseFault(%q) (-want +got):\n%s", tc.in, d)
		}
	}
}

func TestSimConfigProfile(t *testing.T) {
	f := simFlags{profile: ecssim.ProfileRealistic, attach: time.Second,
		set: func(name string) bool { return name == "attach-delay" }}
	cfg, err := simConfig(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Delays.Attach != time.Second || cfg.Delays.Detach != ecssim.RealisticDetach ||
		cfg.StaleReads != ecssim.RealisticStaleReads || !cfg.Conflicts {
		t.Errorf("realistic profile with --attach-delay 1s: %+v", cfg)
	}
	if _, err := simConfig(simFlags{profile: "slow"}, nil); err == nil {
		t.Error("an unknown profile was accepted")
	}
}
