// Command etcd is etcd's own server, built from the go.etcd.io/etcd/server/v3
// module at the version go.mod pins.  The module's root package is a main
// package too, but its binary would be named after the import path's last
// element ("v3"); a one-line main of our own gives the binary its real name.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
