package cloud

import (
	"strings"

	sdkerrors "github.com/aliyun/alibaba-cloud-sdk-go/sdk/errors"
)

// Unavailable reports whether an Observer outcome (an APIError code, "ok",
// or "Canceled") says the API did not serve the call: throttled, a 5xx, a
// timeout, no answer at all. Business errors (an invalid parameter, an
// exhausted vSwitch) mean the API answered. The agent counts such outcomes
// in a row to tell that the cloud is unreachable (degraded mode).
func Unavailable(outcome string) bool {
	if strings.HasPrefix(outcome, "Throttling") {
		return true
	}
	switch outcome {
	case "InternalError", "ServiceUnavailable", "UnknownError", CodeTransport, sdkerrors.TimeoutErrorCode:
		return true
	}
	return classOf(outcome, 0) == ErrUnavailable || classOf(outcome, 0) == ErrThrottled
}
