package cloud

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestClassOf(t *testing.T) {
	tests := []struct {
		code      string
		status    int
		class     error
		retryable bool
	}{
		{"Throttling", 400, ErrThrottled, true},
		{"Throttling.User", 400, ErrThrottled, true},
		{"Throttling.Api", 400, ErrThrottled, true},
		{"InternalError", 500, ErrUnavailable, true},
		{"ServiceUnavailable", 503, ErrUnavailable, true},
		{"", 502, ErrUnavailable, true},
		{"", 429, ErrThrottled, true},
		{"Operation.Conflict", 403, ErrConflict, true},
		{"InvalidOperation.InvalidEniState", 400, ErrConflict, false},
		{"InvalidIp.IpAssigned", 403, ErrConflict, false},
		{"InvalidPrivateIpAddress.Duplicated", 400, ErrConflict, false},
		{"InvalidOperation.DetachPrimaryEniNotAllowed", 400, ErrConflict, false},
		{"InvalidEniId.NotFound", 404, ErrNotFound, false},
		{"InvalidEcsId.NotFound", 404, ErrNotFound, false},
		{"InvalidInstanceId.NotFound", 404, ErrNotFound, false},
		{"InvalidVSwitchId.NotFound", 404, ErrNotFound, false},
		{"InvalidSecurityGroupId.NotFound", 404, ErrNotFound, false},
		{"InvalidVSwitchId.IpNotEnough", 403, ErrVSwitchExhausted, false},
		{"QuotaExceeded.PrivateIpAddress", 403, ErrVSwitchExhausted, false},
		{"EniPerInstanceLimitExceeded", 403, ErrLimitExceeded, false},
		{"MaxEniCountExceeded", 403, ErrLimitExceeded, false},
		{"InvalidOperation.Ipv4CountExceeded", 403, ErrLimitExceeded, false},
		{"InvalidOperation.Ipv6CountExceeded", 403, ErrLimitExceeded, false},
		{"IdempotentParameterMismatch", 400, ErrIdempotencyMismatch, false},
		{"IdempotentFailed", 400, ErrTokenBurnt, false},
		{"IdempotentProcessing", 400, ErrConflict, true},
		{"LastTokenProcessing", 400, ErrConflict, true},
		{"OperationConflict", 403, ErrConflict, true},
		// The status ECS's common error table gives: the code decides.
		{"OperationConflict", 409, ErrConflict, true},
		{"InvalidOperation.InvalidEcsState", 403, ErrConflict, true},
		{"Rejected.Throttling", 400, ErrThrottled, true},
		{"SignatureDoesNotMatch", 400, ErrAuth, false},
		{"InvalidAccessKeyId.NotFound", 404, ErrAuth, false},
		{"Forbidden.RAM", 403, ErrAuth, false},
		{"InvalidParameter", 400, nil, false},
		{"InvalidAction.NotFound", 404, nil, false},
		{"InvalidSecurityToken.Expired", 400, ErrAuth, false},
		{"InvalidIp.IpUnassigned", 400, nil, false},
		{"SecurityGroupInstanceLimitExceed", 403, ErrLimitExceeded, false},
		{"InvalidOperation.VpcMismatch", 403, nil, false},
		{"InvalidSecurityGroupId.NotVpc", 403, nil, false},
		{"InvalidOperation.InvalidEniType", 403, nil, false},
		{"InvalidOperation.EniServiceManaged", 403, nil, false},
	}
	all := []error{ErrThrottled, ErrNotFound, ErrVSwitchExhausted, ErrLimitExceeded, ErrConflict, ErrIdempotencyMismatch, ErrTokenBurnt, ErrAuth, ErrUnavailable}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			err := error(&APIError{Action: "A", Code: tt.code, HTTPStatus: tt.status, class: classOf(tt.code, tt.status)})
			wrapped := errors.Join(errors.New("context"), err)
			for _, s := range all {
				if got, want := errors.Is(wrapped, s), s == tt.class; got != want {
					t.Errorf("errors.Is(%s, %v) = %v, want %v", tt.code, s, got, want)
				}
			}
			if got := Retryable(wrapped); got != tt.retryable {
				t.Errorf("Retryable(%s) = %v, want %v", tt.code, got, tt.retryable)
			}
		})
	}
}

func TestDefinite(t *testing.T) {
	for _, tt := range []struct {
		code   string
		status int
		want   bool
	}{
		{"InvalidVSwitchId.IpNotEnough", 403, true},
		{"IdempotentFailed", 400, true},
		{"IdempotentParameterMismatch", 400, true},
		{"OperationConflict", 403, true},
		{"OperationConflict", 409, true},
		{"Throttling", 400, true},
		{"IdempotentProcessing", 400, false},
		{"LastTokenProcessing", 400, false},
		{"LastTokenProcessing", 403, false},
		{"InternalError", 500, false},
		{"ServiceUnavailable", 503, false},
		{CodeTransport, 0, false},
	} {
		err := fmt.Errorf("create eni: %w", &APIError{Action: "A", Code: tt.code, HTTPStatus: tt.status, class: classOf(tt.code, tt.status)})
		if got := Definite(err); got != tt.want {
			t.Errorf("Definite(%s %d) = %v, want %v", tt.code, tt.status, got, tt.want)
		}
	}
	if Definite(fmt.Errorf("wait: %w", context.DeadlineExceeded)) {
		t.Error("a timeout is definite")
	}
}

// TestSecurityGroupsRefused: the refusals that are the groups' own, and
// nothing else (an unknown ENI or vSwitch is not the groups' fault).
func TestSecurityGroupsRefused(t *testing.T) {
	for _, tt := range []struct {
		code string
		want bool
	}{
		{"InvalidSecurityGroupId.NotFound", true},
		{"InvalidSecurityGroupId.NotVpc", true},
		{"SecurityGroupInstanceLimitExceed", true},
		{"InvalidOperation.VpcMismatch", true}, // a group of another VPC
		{"InvalidOperation.InvalidEniType", false},
		{"InvalidVSwitchId.NotFound", false},
		{"InvalidEniId.NotFound", false},
		{"InvalidVSwitchId.IpNotEnough", false},
		{"Throttling", false},
	} {
		err := fmt.Errorf("create eni: %w", &APIError{Action: "CreateNetworkInterface", Code: tt.code, HTTPStatus: 404, class: classOf(tt.code, 404)})
		if got := SecurityGroupsRefused(err); got != tt.want {
			t.Errorf("SecurityGroupsRefused(%s) = %v, want %v", tt.code, got, tt.want)
		}
	}
	if SecurityGroupsRefused(context.DeadlineExceeded) {
		t.Error("a timeout is a refusal of the groups")
	}
}

// TestAPIErrorThroughSDK checks that what the service says survives the
// SDK: code, request id, status and message, for every class.
func TestAPIErrorThroughSDK(t *testing.T) {
	codes := map[string]int{
		"InvalidEniId.NotFound":            404,
		"InvalidVSwitchId.NotFound":        404,
		"InvalidVSwitchId.IpNotEnough":     403,
		"InvalidOperation.InvalidEniState": 400,
		"IdempotentParameterMismatch":      400,
		"SignatureDoesNotMatch":            400,
		"EniPerInstanceLimitExceeded":      403,
	}
	code := ""
	srv := newFaultServer(t, func(string, int) (int, string) { return codes[code], errBody(code) })
	cfg := fastConfig(srv.endpoint())
	cfg.Retry.MaxAttempts = 1
	c := newTestClient(t, cfg)
	for code = range codes {
		err := c.DeleteENI(testCtx(t), "eni-x")
		if code == "InvalidEniId.NotFound" {
			if err != nil {
				t.Errorf("DeleteENI of a missing ENI: %v, want success", err)
			}
			continue
		}
		var ae *APIError
		if !errors.As(err, &ae) {
			t.Fatalf("%s: got %v (%T), want an *APIError", code, err, err)
		}
		want := APIError{Action: "DeleteNetworkInterface", Code: code, RequestID: "req-" + code, HTTPStatus: codes[code], Message: "message of " + code}
		got := APIError{Action: ae.Action, Code: ae.Code, RequestID: ae.RequestID, HTTPStatus: ae.HTTPStatus, Message: ae.Message}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(APIError{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", code, diff)
		}
		if !errors.Is(err, classOf(code, codes[code])) {
			t.Errorf("%s: %v is not its class", code, err)
		}
	}
}
