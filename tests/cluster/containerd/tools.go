//go:build tools

// containerd, its runc shim and ctr for the tests' real node.  They are main
// packages of the containerd module; importing them under a build tag that is
// never set keeps their dependency graph in go.mod and go.sum, so build.sh
// builds them reproducibly from the module cache.  A module of its own rather
// than a part of ../go: containerd and k8s.io/kubernetes pin different
// versions of shared dependencies (grpc, otel, cri-api), and one module would
// force one side onto the other's.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
