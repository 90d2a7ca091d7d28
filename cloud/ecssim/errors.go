package ecssim

import "fmt"

// apiError is an error answered to a client: a code, its HTTP status and a
// message, rendered as the JSON error body ECS and VPC send.
type apiError struct {
	Code    string
	Status  int
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// errorStatus holds the HTTP status of every error code the simulator
// answers (see the reference ecs-openapi.md). Unknown codes (scripted
// faults) answer 400.
var errorStatus = map[string]int{
	"InvalidVSwitchId.IpNotEnough":                403,
	"QuotaExceeded.PrivateIpAddress":              403,
	"InvalidEniId.NotFound":                       404,
	"InvalidEcsId.NotFound":                       404,
	"InvalidInstanceId.NotFound":                  404,
	"InvalidVSwitchId.NotFound":                   404,
	"InvalidSecurityGroupId.NotFound":             404,
	"InvalidOperation.InvalidEniState":            400,
	"InvalidOperation.DetachPrimaryEniNotAllowed": 400,
	"InvalidOperation.AvailabilityZoneMismatch":   403,
	"EniPerInstanceLimitExceeded":                 403,
	"MaxEniCountExceeded":                         403,
	"InvalidOperation.Ipv4CountExceeded":          403,
	"InvalidOperation.Ipv6CountExceeded":          403,
	"InvalidIp.IpAssigned":                        403,
	"InvalidIp.IpUnassigned":                      403,
	"InvalidPrivateIpAddress.Duplicated":          400,
	"InvalidParameter":                            400,
	"MissingParameter":                            400,
	"Operation.Conflict":                          403,
	"InternalError":                               500,
	"ServiceUnavailable":                          503,
	"Throttling":                                  400,
	"Throttling.User":                             400,
	"IdempotentParameterMismatch":                 400,
	"SignatureDoesNotMatch":                       400,
	"InvalidAccessKeyId.NotFound":                 404,
	"InvalidSecurityToken.Expired":                400,
	"InvalidAction.NotFound":                      404,
	"SignatureNonceUsed":                          400,
	"InvalidVSwitchId.NotSupportIpv6":             403,
}

// errorMessages are the default messages of the retryable fault codes.
var errorMessages = map[string]string{
	"Throttling":         "Request was denied due to request throttling.",
	"Throttling.User":    "Request was denied due to user flow control.",
	"InternalError":      "The request processing has failed due to some unknown error.",
	"ServiceUnavailable": "The request has failed due to a temporary failure of the server.",
}

// apiErr returns the error with code and its real HTTP status.
func apiErr(code, format string, args ...any) *apiError {
	st, ok := errorStatus[code]
	if !ok {
		st = 400
	}
	return &apiError{Code: code, Status: st, Message: fmt.Sprintf(format, args...)}
}
