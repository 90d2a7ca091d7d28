package ecssim_test

import (
	"strconv"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/requests"
)

func requestsInt(n int) requests.Integer { return requests.Integer(strconv.Itoa(n)) }
