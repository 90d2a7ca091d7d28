// Package ecssim is a local simulator of the ECS (2014-05-26) and VPC
// (2016-04-28) RPC APIs and the instance metadata service, faithful enough
// that the unmodified alibaba-cloud-sdk-go talks to it over HTTP. Tests,
// "enid demo", "enid sim" and the benchmarks stand it in for the cloud that
// package cloud observes (observe step) and changes (execute step). It
// imports the standard library only.
//
// # Wire protocol
//
// Requests are RPC style on "/": parameters in the query and/or a form body
// (merged), signature v1 (HMAC-SHA1) verified over the method and every
// parameter. An unknown AccessKeyId answers InvalidAccessKeyId.NotFound
// (404), a bad signature SignatureDoesNotMatch (400) with the server's
// string to sign, a SignatureNonce reused within 15 minutes
// SignatureNonceUsed. Answers are JSON with the exact field names of the
// SDK's response types; errors carry RequestId, HostId, Code, Message and
// Recommend (all strings) with the real HTTP status of the code.
//
// Actions: DescribeInstances, DescribeInstanceTypes,
// DescribeNetworkInterfaces, CreateNetworkInterface, AttachNetworkInterface,
// DetachNetworkInterface, DeleteNetworkInterface, AssignPrivateIpAddresses,
// UnassignPrivateIpAddresses, AssignIpv6Addresses, UnassignIpv6Addresses,
// ModifyNetworkInterfaceAttribute (ECS) and DescribeVSwitches (VPC, also
// accepted with the ECS version).
// Listings page with NextToken/MaxResults (the token names the last ID
// returned, so changes between pages neither repeat nor skip entries;
// NextToken is "" on the last page) or PageNumber/PageSize (see Request
// rules).
//
// # Model
//
//   - One region, one VPC, zones, vSwitches with IPv4 and optional IPv6
//     CIDRs. Addresses are really allocated: the first address and the last
//     three of each CIDR are reserved (the third from the end is the
//     gateway, x.x.x.253 in a /24), so a /24 has 252; allocation walks
//     forward from a cursor so that a released address is reused late;
//     AvailableIpAddressCount moves with every change.
//   - Instances of real types (InstanceTypes) with their ENI, IPv4-per-ENI
//     and IPv6-per-ENI limits, each with a primary ENI (Type Primary, never
//     detachable) holding a primary IP and, with InstanceSpec.IPv6Count
//     (RunInstances' Ipv6AddressCount), IPv6 addresses of its vSwitch.
//   - ENIs: Available -> Attaching -> InUse -> Detaching -> Available ->
//     Deleting -> gone (then InvalidEniId.NotFound), each asynchronous step
//     after Config.Delays. Limits: EniQuantity per instance
//     (EniPerInstanceLimitExceeded), EniPrivateIpAddressQuantity and
//     EniIpv6AddressQuantity per attached ENI (Ipv4CountExceeded /
//     Ipv6CountExceeded, also checked at attach), and the limits of an ENI
//     that is not attached (see Request rules); an optional account ENI
//     quota (MaxEniCountExceeded), zone match at attach.
//   - IPv4 prefixes: a /28 aligned in the vSwitch CIDR none of whose 16
//     addresses is reserved or held (so a /24 has 14), chosen walking
//     forward from a cursor like single addresses. CreateNetworkInterface
//     takes Ipv4PrefixCount or Ipv4Prefix.N (1..10, instead of secondary
//     addresses), AssignPrivateIpAddresses the same
//     instead of addresses (not both kinds in one call), and
//     UnassignPrivateIpAddresses Ipv4Prefix.N (1..10) beside
//     PrivateIpAddress.N; Describe and the create and assign answers carry
//     them (Ipv4PrefixSets, AssignedPrivateIpAddressesSet.Ipv4PrefixSet).
//     Each prefix takes one private IPv4 slot of the ENI, shared with
//     secondary addresses (Ipv4CountExceeded at assign and attach; 50 slots,
//     the primary's included, on an ENI that is not attached), and 16
//     addresses of AvailableIpAddressCount. A prefix is released whole
//     (an address inside it is no secondary address: IpUnassigned), and
//     with its ENI. A vSwitch with no free aligned /28 refuses a prefix
//     with InvalidVSwitchId.IpNotEnough however many single addresses it
//     has: FragmentVSwitch (and POST /_sim/fragment) takes one address of
//     every free /28 for an outside holder to make that so, DefragmentVSwitch
//     (POST /_sim/defragment) gives them back; Dump shows them (Held) and
//     the free /28s (FreePrefixes) per vSwitch. OccupyVSwitch holds every
//     free address of a vSwitch but a few for the same outside holder, as
//     other products in a vSwitch take its addresses (load balancers,
//     databases, other clusters): the exhausted vSwitch of a real account,
//     with AvailableIpAddressCount as low; DefragmentVSwitch gives them
//     back too.
//   - ModifyNetworkInterfaceAttribute: SecurityGroupId.N replaces the ENI's
//     groups (1..10 distinct, each must exist: InvalidSecurityGroupId.NotFound;
//     more or repeated: InvalidParameter); the ENI must be Available or InUse;
//     Description is stored too.
//   - ClientToken on CreateNetworkInterface, AssignPrivateIpAddresses and
//     AssignIpv6Addresses: the same token and parameters get the first
//     answer again with no new effect; other parameters get
//     IdempotentParameterMismatch; a token whose request failed with a
//     non-5xx error is burnt, and every resend answers IdempotentFailed,
//     whatever changed since (scripted faults burn too, except throttling,
//     OperationConflict and IdempotentProcessing, taken as refused before
//     processing); a 5xx is forgotten; a resend while the first request is
//     still in flight (its latency included) gets IdempotentProcessing.
//   - Conflicts (Config.Conflicts, on in the realistic profile): a mutation
//     holds its ENI and instance from admission to answer; another
//     mutation of either meanwhile gets OperationConflict. Attach and
//     detach naming a missing instance get InvalidEcsId.NotFound.
//   - Tags (TagKey/TagValue on ENIs, Key/Value on vSwitches; filters by
//     Tag.N, every tag given must match, a key without a value matches any
//     value) and security groups (must exist; Config.SecurityGroups).
//     TagVSwitch (POST /_sim/tag-vswitch) tags a vSwitch at run time, as
//     VPC's TagResources does.
//   - Instance lifecycle (lifecycle.go): StopInstance and StartInstance
//     (Status Stopped or Running in DescribeInstances and its Status
//     filter; the ENIs stay attached), and ReleaseInstance, what
//     DeleteInstance or an expiring spot or subscription instance does.
//     From ECS's "Retain and reuse an ENI" (user guide, 2026-02): each
//     attached ENI is released or retained by its "Delete on instance
//     release" setting, CreateNetworkInterface's DeleteOnRelease (stored,
//     and reported by Describe); a retained secondary ENI is detached and
//     left Available with its addresses, tags and security groups. The
//     primary ENI goes with the instance. The API models name no default
//     for DeleteOnRelease at CreateNetworkInterface: absent is taken as
//     false (retained), the behaviour the older ENI guide describes for an
//     ENI created on its own. Afterwards the instance is not listed, and
//     attach and detach naming it answer InvalidEcsId.NotFound.
//   - Metadata service on its own listener, consistent with the model:
//     instance facts, network/interfaces/macs/<mac>/... for InUse ENIs once
//     Config.MetadataLag has passed, the PUT /latest/api/token flow
//     (optionally required), and RAM-role credentials whose STS key the API
//     accepts (with its SecurityToken) until it expires. A path under
//     /latest/ is about the calling instance, found by the request's source
//     address (the instance's primary private address, as ECS answers each
//     instance about itself); /<instance-id>/latest/... names one instead,
//     for callers that share a source (a test process on the host).
//
// # Request rules
//
// Each rule is ECS's documented behaviour, with its source (rules.go
// names the sources and holds the limits; rules_test.go drives each
// through the unmodified SDK). "v7" is Alibaba's generated API model
// github.com/alibabacloud-go/ecs-20140526/v7 v7.7.0, "ref" the ECS API
// reference page of the action (its parameter table, usage notes and
// error table), "common" the reference's common error table.
//
//   - Paging. DescribeNetworkInterfaces reads MaxResults below 10 as 10 and
//     above 500 as 500 (v7), refuses one that is no integer, takes PageSize
//     1..1000 (v7; the 2021 ref said at most 100: the newer model is
//     followed). DescribeInstances reads MaxResults into 10..100 (v7), takes
//     PageSize 1..100 (ref 2021). With NextToken or MaxResults, PageNumber
//     and PageSize are ignored (ref).
//   - DescribeNetworkInterfaces filters: NetworkInterfaceId.N,
//     PrivateIpAddress.N (secondary addresses) and Ipv6Address.N take N
//     1..100 (v7); SecurityGroupId selects secondary ENIs only, never a
//     primary one (v7, ref: primary ENIs are found by DescribeInstances).
//   - CreateNetworkInterface: SecurityGroupId xor SecurityGroupIds.N (v7,
//     ref); SecondaryPrivateIpAddressCount 1..49 xor PrivateIpAddress.N
//     0..10 (v7, ref); either xor Ipv4PrefixCount/Ipv4Prefix.N (Terway
//     pkg/aliyun/client/options.go; Terraform's ConflictsWith);
//     Ipv6AddressCount 1..10 xor Ipv6Address.N 1..10 (v7; Terraform). Each
//     conflict answers InvalidParameter.Conflict (400, ref). PrimaryIpAddress,
//     PrivateIpAddress.N and Ipv6Address.N are honoured: an address named
//     twice (the primary among the secondaries too) is InvalidIp.IpRepeated
//     (403), one outside the vSwitch or reserved InvalidVSwitchId.IpInvalid
//     (403; IPv6: InvalidIp.Address, 403), one in use
//     InvalidPrivateIpAddress.Duplicated (400) (ref error table). IPv6 on a
//     vSwitch without an IPv6 CIDR is InvalidVSwitch.Ipv6NotTurnOn (403, ref
//     AssignIpv6Addresses). Tags (v7, ref): at most 20 (QuotaExceed.Tags,
//     403), keys of 1..128 characters not starting with "aliyun" or "acs:"
//     (in any case) and without http:// or https:// (InvalidTagKey.Malformed,
//     400), each key once (Duplicate.TagKey, 400), values of at most 128
//     characters without http(s):// (InvalidTagValue.Malformed, 400).
//     Description: 2..256 characters (2..255 at
//     ModifyNetworkInterfaceAttribute), not starting with http:// or https://
//     (v7): InvalidDescription.Malformed (400). A ClientToken is at most 64
//     ASCII characters (v7).
//   - AssignPrivateIpAddresses: an address outside the vSwitch or reserved
//     is InvalidVSwitchId.IpInvalid (403), one named twice
//     InvalidIp.IpRepeated (403), one held InvalidIp.IpAssigned (403) (ref);
//     an Available ENI takes at most 10 addresses per call and holds at most
//     50, InvalidOperation.Ipv4CountExceeded (ref 2021 and ROS say 10 per
//     call, v7 says PrivateIpAddress.N 1..50: the sources disagree, and the
//     two that agree are followed).
//   - UnassignPrivateIpAddresses: PrivateIpAddress.N 1..32 (ref, current); an
//     address outside the vSwitch is InvalidVSwitchId.IpInvalid (ref); the
//     primary address is no secondary one: InvalidIp.IpUnassigned, and the
//     call removes nothing (Terway pkg/aliyun/client/ecs.go).
//   - AssignIpv6Addresses / UnassignIpv6Addresses: Ipv6AddressCount and
//     Ipv6Address.N 1..10 per call (v7); an Available ENI holds at most 10
//     IPv6 (ref 2021), InvalidOperation.Ipv6CountExceeded; an address outside
//     the vSwitch's IPv6 CIDR, or malformed, is InvalidIp.Address (403, ref).
//   - Lifecycle: a DetachNetworkInterface re-sent while the ENI is Detaching
//     and a DeleteNetworkInterface re-sent while it is Deleting succeed and
//     leave the transition under way alone (ref: detach needs "Detaching or
//     InUse"; a detach or delete stuck in its state may be re-initiated).
//   - Statuses: OperationConflict answers 409 and LastTokenProcessing 403
//     (common); the ENI actions' dotted Operation.Conflict 403 (ref).
//   - Metadata: network-type is "vpc"; /latest/dynamic/instance-identity/document
//     is the identity document (zone-id, serial-number, instance-id,
//     region-id, private-ipv4, owner-account-id, mac, image-id,
//     instance-type), and image-id and serial-number are under meta-data
//     too ("Instance metadata items"); the token endpoint refuses a request
//     carrying X-Forwarded-For with 403 ("View instance metadata": no proxy
//     access).
//
// # Faults and observation
//
// Random error rates per action or global (Throttling, InternalError,
// ServiceUnavailable by default; any codes, e.g. OperationConflict), latency
// (fixed + uniform + exponential, per action), an account-wide token bucket
// answering Throttling.User, metadata-service 5xx/429 (MetadataFaults, or
// one-shot with Fault.Action MetadataAction),
// stale reads (for Config.StaleReads after a change, Describe calls show
// an ENI as it was before, and do not list a new one yet), and scripted
// one-shot faults ("fail the next N AttachNetworkInterface with X"). All
// are set in Config and at run time with InjectFault and SetSettings or the
// control API on the API listener: GET /_sim/counters, POST
// /_sim/reset-counters, GET /_sim/state, POST /_sim/faults, GET and POST
// /_sim/settings, POST /_sim/fragment and /_sim/defragment, POST
// /_sim/release-instance, /_sim/stop-instance, /_sim/start-instance and
// /_sim/tag-vswitch. Counters count every call by action and outcome ("ok" or
// the error code). Dump returns the whole model; Config.StateFile persists
// it across restarts. Hooks let a test give an attached ENI a real device
// and route its addresses.
//
// # Profiles
//
// ApplyProfile sets the timing and faults for a purpose: ProfileFast (the
// default: 50 ms attaches, nothing stale, no lag, no latency) for unit tests
// and the demo, ProfileRealistic (3 s attaches, 2 s detaches, 1.5 s stale
// describes, 2 s metadata lag, 60 ms + exp(60 ms) per call, conflicts on
// overlap and for 2% of mutations, 1% metadata faults) for what ECS
// documents and peers observe. "enid sim --profile" and the e2e harness's
// ENID_E2E_PROFILE select one.
//
// # Not modelled
//
// Timestamp freshness (requests are not refused for clock skew), XML
// answers (Format is ignored: always JSON), signature v3/ROA, more than one
// VPC or region, trunk and member ENIs beyond the Trunk type label, IPv6
// prefixes (Ipv6PrefixCount, /80), the vSwitch's reserved CIDR blocks that
// real ECS takes IPv4 prefixes from (any free aligned /28 of the vSwitch
// serves here), the exact code ECS answers for a prefix the ENI does not
// hold (taken as InvalidIp.IpUnassigned, as for addresses), prefixes in
// the metadata service and in DescribeNetworkInterfaces' PrivateIpAddress
// filter, ENI attributes other than security groups, Description and
// DeleteOnRelease (name, queues, ... are accepted and ignored; a change of
// DeleteOnRelease by ModifyNetworkInterfaceAttribute is not modelled), security groups' VPC and network type (every group is of
// the one VPC: no InvalidOperation.VpcMismatch), per-group instance limits
// (SecurityGroupInstanceLimitExceed), a delay before a group change takes
// effect, EIPs, security group rules, the instance states Pending,
// Starting and Stopping (stop and start are immediate, so
// InvalidOperation.InvalidEcsState only comes as a scripted fault), the
// ECS actions that create, stop, start and release instances (the model's
// methods and the control API stand in for them), NetworkCardIndex, quotas other than the
// ENI count, LastTokenProcessing and Rejected.Throttling (scripted only), the
// ClientToken validity period (tokens are remembered for the server's life,
// not persisted in StateFile), HTTP statuses ECS does not document
// (IdempotentFailed, IdempotentProcessing answer 400,
// InvalidOperation.InvalidEcsState 403, by analogy; the metadata service's
// refusals of a bad TTL, 400, and of X-Forwarded-For, 403), codes the
// references do not pin down (PrivateIpAddress.N beyond an Available ENI's
// per-call limit answers Ipv4CountExceeded, a list beyond its N range
// InvalidParameter, an IPv6 address of another CIDR InvalidIp.Address
// rather than InvalidVSwitchId.IpInvalid, a Description breaking its rule
// InvalidDescription.Malformed as other ECS actions answer), the instance
// identity signature (dynamic/instance-identity/pkcs7) and other metadata
// items (user-data, dns-conf, ntp-conf, ...), tag rules beyond
// CreateNetworkInterface's (TagResources is not an action here; Describe
// takes any Tag.N key), the status of InvalidAccessKeyId.NotFound (404
// here, as clients observe; the common table says 400), staleness of
// vSwitch counts (DescribeVSwitches is exact),
// a stale window that varies per change (it is fixed: Config.StaleReads),
// request parameter types beyond what the SDK sends, and the
// 100.100.100.200 address itself (clients take the metadata base
// URL from ENID_METADATA_ENDPOINT). Transition delays and latency use real
// timers unless Config.Timers gives others (the deterministic simulation,
// package simulation, gives its virtual clock and calls Handler
// in-process); Config.Clock drives timestamps, stale-read windows, metadata
// lag and token and credential expiry. AddForeignENI stands in for another
// controller's ENI (no enid tag), attached at once. The IPv6 gateway is, by analogy with
// IPv4, the address at index -3 of the vSwitch IPv6 CIDR (ECS documents no
// value for ipv6-gateway); the metadata item and ENIEvent.GatewayV6 give
// it, and a datapath harness answers it (simvpc's AnswerGatewayV6).
package ecssim
