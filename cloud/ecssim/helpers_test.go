package ecssim_test

import (
	"errors"
	sdkerrors "github.com/aliyun/alibaba-cloud-sdk-go/sdk/errors"
	"strconv"
	"sync"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/requests"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
)

func requestsInt(n int) requests.Integer { return requests.Integer(strconv.Itoa(n)) }

func ecsDescribeInstances() *ecs.DescribeInstancesRequest {
	return ecs.CreateDescribeInstancesRequest()
}

// fakeClock is a settable clock for Config.Clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// asServerErr finds the SDK server error in err.
func asServerErr(err error, target *interface{ HttpStatus() int }) bool {
	var se *sdkerrors.ServerError
	if errors.As(err, &se) {
		*target = se
		return true
	}
	return false
}

// countParam is an optional count parameter: 0 sends none (ECS documents
// 1 as the least of every count).
func countParam(n int) requests.Integer {
	if n == 0 {
		return ""
	}
	return requestsInt(n)
}
