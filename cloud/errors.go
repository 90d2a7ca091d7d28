package cloud

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	sdkerrors "github.com/aliyun/alibaba-cloud-sdk-go/sdk/errors"
)

// Error classes. Every error a Client method returns for a failed API call
// wraps an *APIError, and errors.Is(err, ErrX) reports its class. A code
// outside every class matches none of them (and is not retryable).
var (
	// ErrThrottled: the API refused the call because of a rate limit
	// (Throttling, Throttling.User, Throttling.Api, ...). Retryable.
	ErrThrottled = errors.New("throttled")
	// ErrNotFound: the named resource does not exist (codes ending in
	// .NotFound other than credential ones).
	ErrNotFound = errors.New("not found")
	// ErrVSwitchExhausted: the vSwitch has no free address
	// (InvalidVSwitchId.IpNotEnough, QuotaExceeded.PrivateIpAddress). For
	// a request of IPv4 prefixes it means the vSwitch has no free aligned
	// /28, though it may still have free single addresses (fragmentation):
	// the caller, who knows what it asked, tells the two apart.
	ErrVSwitchExhausted = errors.New("vswitch has no free address")
	// ErrLimitExceeded: an instance-type or account limit was reached
	// (EniPerInstanceLimitExceeded, MaxEniCountExceeded, Ipv4CountExceeded, ...).
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrConflict: the resource is not in a state that allows the call, or
	// the call collides with another (InvalidOperation.InvalidEniState,
	// Operation.Conflict, InvalidIp.IpAssigned, ...). Only the codes that
	// say another operation is running (see Retryable) are retried by the
	// client; the rest need a fresh observation.
	ErrConflict = errors.New("conflict")
	// ErrTokenBurnt: the ClientToken's earlier request failed, so ECS
	// refuses every resend of it (IdempotentFailed). Only a new token can
	// succeed: the caller must derive one (planner.Memory.TokenFailed).
	ErrTokenBurnt = errors.New("client token burnt by an earlier failure")
	// ErrIdempotencyMismatch: a ClientToken was reused with other
	// parameters (IdempotentParameterMismatch).
	ErrIdempotencyMismatch = errors.New("client token reused with other parameters")
	// ErrAuth: the credentials were refused (SignatureDoesNotMatch,
	// InvalidAccessKeyId.*, Forbidden*, InvalidSecurityToken.*, ...).
	ErrAuth = errors.New("authentication or authorization failed")
	// ErrInvalidRequest: the client refused, before sending it, a request
	// that ECS documents it refuses (see the request builders, e.g.
	// CreateENIRequest). No call was made, so no ClientToken was burnt;
	// the same request will be refused again.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrUnavailable: the service failed or could not be reached
	// (InternalError, ServiceUnavailable, other 5xx, transport errors).
	// Retryable.
	ErrUnavailable = errors.New("service unavailable")
)

// CodeTransport is the APIError.Code of a call that got no HTTP response
// (connection refused, reset, timeout).
const CodeTransport = "Transport"

// APIError is one failed API call: the action, the code the service (or
// the SDK) returned, and the request id to quote to support.
type APIError struct {
	// Action is the API action, e.g. "AttachNetworkInterface".
	Action string
	// Code is the service error code ("Throttling.User"), an SDK client
	// error code ("SDK.TimeoutError") or CodeTransport.
	Code string
	// RequestID is the service's request id ("" when there was no answer).
	RequestID string
	// HTTPStatus is the response status (0 when there was no answer).
	HTTPStatus int
	// Message is the service's message or the transport error text.
	Message string

	class error
	err   error // the underlying SDK or transport error, for Unwrap
}

// Error renders the action, the code, the status and the request id.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", e.Action, e.Code)
	if e.HTTPStatus != 0 {
		fmt.Fprintf(&b, " (http %d)", e.HTTPStatus)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " [request %s]", e.RequestID)
	}
	return b.String()
}

// Is reports whether target is the error's class sentinel.
func (e *APIError) Is(target error) bool {
	return e.class != nil && target == e.class
}

// Unwrap returns the underlying SDK or transport error.
func (e *APIError) Unwrap() error { return e.err }

// Retryable reports whether a call that failed with err may succeed when
// repeated unchanged: throttling, InternalError, ServiceUnavailable, other
// 5xx, transport errors, another operation running on the instance or ENI
// (Operation.Conflict, OperationConflict, InvalidOperation.InvalidEcsState)
// and the same ClientToken still in flight (IdempotentProcessing,
// LastTokenProcessing). An error that also says the caller's context
// ended is not.
func Retryable(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch {
	case ae.class == ErrThrottled, ae.class == ErrUnavailable:
		return true
	case busyCode(ae.Code), inFlightCode(ae.Code):
		return true
	}
	return false
}

// busyCode reports whether code says another operation on the instance or
// ENI is running: nothing was done, and the same call may succeed later.
func busyCode(code string) bool {
	switch code {
	case "Operation.Conflict", "OperationConflict", "InvalidOperation.InvalidEcsState",
		"InvalidOperation.Conflict":
		return true
	}
	return false
}

// inFlightCode reports whether code says a request with the same
// ClientToken is still being processed: resend the same token later.
func inFlightCode(code string) bool {
	return code == "IdempotentProcessing" || code == "LastTokenProcessing"
}

// SecurityGroupsRefused reports whether err is the cloud refusing a
// request for its security groups: a group that does not exist or is not
// usable here (InvalidSecurityGroupId.*: NotFound, NotVpc, ...), a group of
// another VPC (InvalidOperation.VpcMismatch), or one that holds all the
// ENIs it may (SecurityGroupInstanceLimitExceed). Another
// request with other groups may succeed where this one failed.
func SecurityGroupsRefused(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	return strings.HasPrefix(ae.Code, "InvalidSecurityGroupId.") || ae.Code == "InvalidOperation.VpcMismatch" ||
		ae.Code == "SecurityGroupInstanceLimitExceed"
}

// Definite reports whether a call that carried a ClientToken failed with
// err in a way that burns the token on ECS: the service answered a non-5xx
// error other than "still in flight". A 5xx, a transport error, a timeout
// or a cancelled context leave the outcome open, so the same token must be
// resent; after a definite failure only a new token can succeed.
func Definite(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return ae.HTTPStatus >= 400 && ae.HTTPStatus < 500 && !inFlightCode(ae.Code)
}

// classOf maps a service error code (and HTTP status when the code says
// nothing) to its class sentinel, or nil.
func classOf(code string, status int) error {
	switch code {
	case "InvalidVSwitchId.IpNotEnough", "QuotaExceeded.PrivateIpAddress":
		return ErrVSwitchExhausted
	case "IdempotentParameterMismatch":
		return ErrIdempotencyMismatch
	case "IdempotentFailed":
		return ErrTokenBurnt
	case "IdempotentProcessing", "LastTokenProcessing",
		"OperationConflict", "InvalidOperation.InvalidEcsState":
		return ErrConflict
	case "Rejected.Throttling":
		return ErrThrottled
	case "InternalError", "ServiceUnavailable", "UnknownError":
		return ErrUnavailable
	case "InvalidOperation.InvalidEniState", "Operation.Conflict", "InvalidIp.IpAssigned",
		"InvalidPrivateIpAddress.Duplicated", "InvalidOperation.DetachPrimaryEniNotAllowed",
		"IncorrectInstanceStatus", "IncorrectVSwitchStatus", "InvalidOperation.Conflict":
		return ErrConflict
	case "EniPerInstanceLimitExceeded", "MaxEniCountExceeded",
		"InvalidOperation.Ipv4CountExceeded", "InvalidOperation.Ipv6CountExceeded":
		return ErrLimitExceeded
	case "SignatureDoesNotMatch", "IncompleteSignature", "SignatureNonceUsed",
		"InvalidTimeStamp.Expired", "NoPermission":
		return ErrAuth
	case "SecurityGroupInstanceLimitExceed":
		// ModifyNetworkInterfaceAttribute: a group holds all the
		// instances and ENIs it may (the code lacks the final "ed").
		return ErrLimitExceeded
	case "InvalidAction.NotFound":
		return nil // the API lacks the action: not a missing resource
	case "InvalidOperation.VpcMismatch", "InvalidSecurityGroupId.NotVpc", "InvalidOperation.InvalidEniType",
		"InvalidOperation.EniServiceManaged":
		// ModifyNetworkInterfaceAttribute refusing the request itself (a
		// group of another VPC or network type, an ENI enid must not
		// change): no class, nothing to retry; the error names the code.
		return nil
	}
	switch {
	case strings.HasPrefix(code, "Throttling"):
		return ErrThrottled
	case strings.HasPrefix(code, "InvalidAccessKeyId"), strings.HasPrefix(code, "InvalidSecurityToken"),
		strings.HasPrefix(code, "Forbidden"):
		return ErrAuth
	case strings.HasSuffix(code, ".NotFound"):
		return ErrNotFound
	case strings.HasPrefix(code, "QuotaExceeded"), strings.HasSuffix(code, "LimitExceeded"),
		strings.HasSuffix(code, "CountExceeded"):
		return ErrLimitExceeded
	}
	switch {
	case code != "":
		return nil
	case status == 429:
		return ErrThrottled
	case status >= 500:
		return ErrUnavailable
	case status == 401 || status == 403:
		return ErrAuth
	case status == 404:
		return ErrNotFound
	}
	return nil
}

// classify turns what the SDK returned for one attempt of action into an
// *APIError. It returns nil for nil and the context error when ctx ended
// (the caller's deadline, not the service, stopped the call).
func classify(ctx context.Context, action string, err error) error {
	if err == nil {
		return nil
	}
	var se *sdkerrors.ServerError
	if errors.As(err, &se) {
		return &APIError{
			Action: action, Code: se.ErrorCode(), RequestID: se.RequestId(),
			HTTPStatus: se.HttpStatus(), Message: se.Message(),
			class: classOf(se.ErrorCode(), se.HttpStatus()), err: err,
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", action, ctx.Err())
	}
	var ce *sdkerrors.ClientError
	if errors.As(err, &ce) {
		ae := &APIError{Action: action, Code: ce.ErrorCode(), Message: ce.Message(), err: err}
		if ce.ErrorCode() == sdkerrors.TimeoutErrorCode || isTransport(ce.OriginError()) {
			ae.class = ErrUnavailable
		}
		return ae
	}
	if isTransport(err) {
		return &APIError{Action: action, Code: CodeTransport, Message: err.Error(), class: ErrUnavailable, err: err}
	}
	return &APIError{Action: action, Code: sdkerrors.DefaultClientErrorCode, Message: err.Error(), err: err}
}

// isTransport reports whether err is a network-level failure (no answer).
func isTransport(err error) bool {
	if err == nil {
		return false
	}
	var ue *url.Error
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ue) || errors.As(err, &ne) || errors.As(err, &oe)
}
