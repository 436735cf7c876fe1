package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// shortConnections is how many short connections the head opens and closes per worker
// before it keeps one open, as the real head does while loading (fact 11).
const shortConnections = 3

// rpcTimeout bounds one connect or round trip; the real head has no such limit, but a
// fake that hangs forever in a test helps nobody.
const rpcTimeout = 30 * time.Second

// errWorkerBroken means a worker's connection failed: the real head aborts (fact 13).
var errWorkerBroken = errors.New("remote RPC server crashed or returned malformed response")

// worker is the head's kept-open connection to one rpc-server; requests share it.
type worker struct {
	addr string
	mu   sync.Mutex // one round trip at a time on the shared connection
	conn net.Conn
	r    *bufio.Reader
}

// connectWorkers attaches the head to every worker, or fails naming the first it cannot reach.
func connectWorkers(addrs []string, version string) ([]*worker, error) {
	var ws []*worker
	for _, addr := range addrs {
		for i := 0; i < shortConnections; i++ {
			w, err := dialWorker(addr, version)
			if err != nil {
				closeWorkers(ws)
				return nil, err
			}
			err = w.roundTrip("MEM", "MEM")
			w.conn.Close()
			if err != nil {
				closeWorkers(ws)
				return nil, fmt.Errorf("query memory of RPC server %s: %w", addr, err)
			}
		}
		w, err := dialWorker(addr, version)
		if err != nil {
			closeWorkers(ws)
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}

func closeWorkers(ws []*worker) {
	for _, w := range ws {
		w.conn.Close()
	}
}

// dialWorker connects and checks the protocol version (fact 17).
func dialWorker(addr, version string) (*worker, error) {
	conn, err := net.DialTimeout("tcp", addr, rpcTimeout)
	if err != nil {
		return nil, fmt.Errorf("failed to connect to RPC server %s: %w", addr, err)
	}
	w := &worker{addr: addr, conn: conn, r: bufio.NewReader(conn)}
	if err := w.roundTrip("HELLO "+version, "OK"); err != nil {
		conn.Close()
		return nil, fmt.Errorf("RPC server %s refused the connection (head version %s): %w",
			addr, version, err)
	}
	return w, nil
}

// roundTrip sends one line and wants a reply starting with want.
func (w *worker) roundTrip(line, want string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.conn.SetDeadline(time.Now().Add(rpcTimeout)); err != nil {
		return fmt.Errorf("set deadline: %w", err)
	}
	if _, err := fmt.Fprintf(w.conn, "%s\n", line); err != nil {
		return fmt.Errorf("send %q: %w", line, err)
	}
	reply, err := w.r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("read reply to %q: %w", line, err)
	}
	if !strings.HasPrefix(reply, want) {
		return fmt.Errorf("unexpected reply to %q: %q", line, strings.TrimSpace(reply))
	}
	return nil
}

// computeAll runs one unit of work on every worker; any failure is errWorkerBroken.
func computeAll(ws []*worker, n int) error {
	for _, w := range ws {
		if err := w.roundTrip(fmt.Sprintf("COMPUTE %d", n), "DONE"); err != nil {
			return fmt.Errorf("%w: %s: %v", errWorkerBroken, w.addr, err)
		}
	}
	return nil
}
