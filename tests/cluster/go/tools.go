//go:build tools

// The Kubernetes commands the tests start are main packages of the pinned
// k8s.io/kubernetes module.  Importing them under a build tag that is never
// set keeps them (and so their whole dependency graph) in go.mod and go.sum,
// so `go mod tidy` does not drop them and the build is reproducible offline
// from the module cache.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
