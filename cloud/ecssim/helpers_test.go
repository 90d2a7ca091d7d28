package ecssim_test

import (
	"strconv"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/requests"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
)

func requestsInt(n int) requests.Integer { return requests.Integer(strconv.Itoa(n)) }

func ecsDescribeInstances() *ecs.DescribeInstancesRequest { return ecs.CreateDescribeInstancesRequest() }
