// Package desired turns files on the node into one validated State: the
// agent config (/etc/enid/config.yaml and drop-ins), the pod attachment
// entries written by the CNI plugin (/run/enid/pods), and hints from the
// kubelet and the container runtime about pods that will soon need an
// address. It also watches those files and wakes its caller when they change.
//
// It is the first step of desired -> observed -> plan -> execute. It is
// strict about bad input and never lets one bad file hide good ones: a bad
// config leaves the last good one in force, a bad entry is reported on its
// own and never hides the others.
package desired
