// Package scripts holds no Go code of the product: it is the home of the project's shell
// tooling (local cluster, demo, install, benchmarks) and of the end-to-end test that runs
// the demo as a person would (demo_e2e_test.go, build tag e2e).
package scripts
