// Package scripts holds no Go code of the product: it is the home of the project's shell
// tooling (local cluster, demo, install, benchmarks) and of the end-to-end tests that run
// them as a person would (build tag e2e): the demo (demo_e2e_test.go) and the cluster's
// netns mode with its faults (cluster_netns_e2e_test.go). monitoring_test.go checks the
// shipped dashboard and alert rules against what the programs serve (no tag: no cluster).
package scripts
