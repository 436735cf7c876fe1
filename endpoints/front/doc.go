// Package front is the front door: one OpenAI-compatible URL for every
// tier, routed by the request's "model" in memory. It reads the endpoint
// files through the same core passes as `llm-upstreams watch` (endpoints/tiers; same checks:
// owners, networks, the job's owner and name in Slurm, leases, fencing,
// hints), so it routes only to heads that nginx would route to; but where
// nginx needs a reload for every routing change (which closes kept-alive
// client connections) and answers 503 at once during a gap, the front door
// swaps its table in memory and holds a request while the tier's view says
// it will be back in time.
//
// A request goes through, top to bottom (Server.ServeHTTP): its body is
// read (bounded), its model names a tier (aliases, the heads' /v1/models,
// the tiers' configured models); a head of that tier serving the model is
// picked (least loaded) among those that take one more: its slots, a few
// more in its own queue (head_queue: a freed slot is taken in
// llama-server's own loop) and as many as reached it another way (load.go);
// with none, the hold rule (package hold, pure) says hold or answer now; a
// held request waits in its tier's queue and is dispatched in fair-share
// (or arrival) order when a head takes one more; past max_held it goes to
// the least loaded head's own queue; a head that refuses, resets or
// answers llama-server's own 503 before any byte reached the client is
// skipped and the request goes to another head or back to the queue.
// Nothing is retried once the client got a byte; a stream cut after that
// is continued on another head (continue.go).
//
// It reads its own table of upstreams.toml, [front] (config.go: Config,
// whose Access is package access's tables); endpoints/config loads the
// file and hands it over. The package owns no files and starts no
// processes: it is one of the core's consumers (Server.Consume takes each
// pass's tiers.Report, as the nginx room does; it never imports nginx),
// and cmd/llm-upstreams wires it to the core's read-only passes, the
// listeners and systemd.
//
// What does not need the server lives in rooms of its own, which import
// neither the front door nor nginx (scripts/rooms_test.go):
//
//   - wire: request keys and edits, JSON scan, answer tally, conversation key
//   - stream: a streamed answer event by event, continuations spliced in
//   - hold: the hold rule (Decide), pure
//   - kvrestore: a cut conversation's saved slot restored on its new head
//   - catalog: each head's /v1/models and the merged /v1/models
//   - headload: what a head has now (its /metrics, or its /slots)
//   - webui: llama-server's web UI: its paths, pages, /props, models feed
//   - accesslog: the access log's line, written off the answers' path
//   - rawconn: the sockets' reads and writes as raw system calls
package front
