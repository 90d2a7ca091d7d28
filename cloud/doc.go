// Package cloud talks to the ECS and VPC OpenAPI and the instance metadata
// service on alibaba-cloud-sdk-go. It fills the API half of observed state
// and executes the cloud actions of a plan: it is used by both the observe
// and the execute steps of desired -> observed -> plan -> execute.
package cloud
