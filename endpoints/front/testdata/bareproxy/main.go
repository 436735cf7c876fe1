// Command bareproxy is the floor of BenchmarkE2EFrontBusy's "bare"
// target: net/http/httputil's ReverseProxy with nothing of the front
// door's (no routing, identity, queue, metrics or log), on one OS thread
// as the front door is shipped (max_procs = 1). What the front door adds
// beyond what this adds is its own.
//
//	bareproxy LISTEN HEAD-URL
package main

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: bareproxy LISTEN HEAD-URL")
		os.Exit(2)
	}
	u, err := url.Parse(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bareproxy:", err)
		os.Exit(2)
	}
	runtime.GOMAXPROCS(1)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}
	fmt.Fprintln(os.Stderr, "bareproxy:", http.ListenAndServe(os.Args[1], rp))
	os.Exit(1)
}
