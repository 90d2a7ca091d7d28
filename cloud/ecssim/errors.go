package ecssim

import (
	"fmt"
	"strings"
)

// apiError is an error answered to a client: a code, its HTTP status and a
// message, rendered as the JSON error body ECS and VPC send.
type apiError struct {
	Code    string
	Status  int
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// statusOf is the HTTP status of every error code the simulator answers:
// the status of the action's error table in the API reference, or of the
// common error table ("common errors", see rules.go). Unknown codes
// (scripted faults) answer 400.
func statusOf(code string) int {
	switch code {
	case "InvalidVSwitchId.IpNotEnough", "QuotaExceeded.PrivateIpAddress",
		"InvalidOperation.AvailabilityZoneMismatch", "EniPerInstanceLimitExceeded",
		"MaxEniCountExceeded", "InvalidOperation.Ipv4CountExceeded",
		"InvalidOperation.Ipv6CountExceeded", "InvalidIp.IpAssigned", "InvalidIp.IpUnassigned",
		"Operation.Conflict", "InvalidVSwitch.Ipv6NotTurnOn", "InvalidVSwitchId.IpInvalid",
		"InvalidIp.Address", "InvalidIp.IpRepeated", "QuotaExceed.Tags",
		// Common errors: "The last token request is processing."
		"LastTokenProcessing",
		// ECS documents no status for this one; 403 as for Operation.Conflict.
		"InvalidOperation.InvalidEcsState":
		return 403
	case "OperationConflict":
		// Common errors: 409, "Request was denied due to conflict with a
		// previous request." (the dotted Operation.Conflict of the ENI
		// actions' tables is 403).
		return 409
	case "InvalidEniId.NotFound", "InvalidEcsId.NotFound", "InvalidInstanceId.NotFound",
		"InvalidVSwitchId.NotFound", "InvalidSecurityGroupId.NotFound",
		"InvalidAccessKeyId.NotFound", "InvalidAction.NotFound":
		return 404
	case "InvalidOperation.InvalidEniState", "InvalidOperation.DetachPrimaryEniNotAllowed",
		"InvalidPrivateIpAddress.Duplicated", "InvalidParameter", "MissingParameter", "Throttling",
		"Throttling.User", "IdempotentParameterMismatch", "SignatureDoesNotMatch",
		"InvalidSecurityToken.Expired", "SignatureNonceUsed", "InvalidParameter.Conflict",
		"Duplicate.TagKey", "InvalidTagKey.Malformed", "InvalidTagValue.Malformed",
		"InvalidDescription.Malformed",
		// ECS documents no status for these; 400 as for
		// IdempotentParameterMismatch and Throttling.
		"IdempotentFailed", "IdempotentProcessing", "Rejected.Throttling":
		return 400
	case "InternalError":
		return 500
	case "ServiceUnavailable":
		return 503
	}
	return 400
}

// defaultMessage is the message of a retryable fault code ("" for others).
func defaultMessage(code string) string {
	switch code {
	case "Throttling":
		return "Request was denied due to request throttling."
	case "Throttling.User":
		return "Request was denied due to user flow control."
	case "InternalError":
		return "The request processing has failed due to some unknown error."
	case "ServiceUnavailable":
		return "The request has failed due to a temporary failure of the server."
	case "OperationConflict":
		return "Request was denied due to conflict with a previous request."
	case "Rejected.Throttling":
		return "Request was denied due to flow control."
	}
	return ""
}

// apiErr returns the error with code and its real HTTP status.
func apiErr(code, format string, args ...any) *apiError {
	return &apiError{Code: code, Status: statusOf(code), Message: fmt.Sprintf(format, args...)}
}

// burnsToken reports whether an answer with code, to a call carrying a
// ClientToken, burns the token (a resend answers IdempotentFailed). ECS
// burns a token whose request failed with a non-5xx error; the codes that
// refuse a call before it is processed (throttling, a conflicting
// operation, the same token in flight) are taken not to, since nothing of
// the request was looked at. ECS does not document that distinction; the
// client copes either way (see package cloud).
func burnsToken(e *apiError) bool {
	if e.Status >= 500 {
		return false
	}
	switch {
	case strings.HasPrefix(e.Code, "Throttling"), e.Code == "Rejected.Throttling",
		e.Code == "OperationConflict", e.Code == "Operation.Conflict",
		e.Code == "IdempotentProcessing", e.Code == "LastTokenProcessing":
		return false
	}
	return true
}
