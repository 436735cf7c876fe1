package rawconn

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rawPair is a connected pair over loopback: the accepted end and the
// dialed end, both raw.
func rawPair(t *testing.T) (accepted, dialed net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := Listener(ln).Accept()
		if err != nil {
			got <- nil
			return
		}
		got <- c
	}()
	d, err := Dialer(&net.Dialer{Timeout: 5 * time.Second})(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a == nil {
		t.Fatal("accept failed")
	}
	if _, ok := a.(*rawConn); !ok {
		t.Fatalf("accepted %T, want *rawConn", a)
	}
	if _, ok := d.(*rawConn); !ok {
		t.Fatalf("dialed %T, want *rawConn", d)
	}
	t.Cleanup(func() { a.Close(); d.Close() })
	return a, d
}

// TestRawConnCarriesEveryByte: bodies from 1 byte to 16 MiB, written in
// one call each while the reader reads slowly in small pieces, so that the
// writer fills the socket's buffer and waits for the poller (EAGAIN)
// again and again; every byte arrives in order, and each direction works
// while the other does.
func TestRawConnCarriesEveryByte(t *testing.T) {
	a, d := rawPair(t)
	for _, size := range []int{1, 100, 64 << 10, 1 << 20, 16 << 20} {
		want := make([]byte, size)
		for i := range want {
			want[i] = byte(rand.IntN(256))
		}
		var wg sync.WaitGroup
		var werr error
		var wn int
		wg.Add(1)
		go func() {
			defer wg.Done()
			wn, werr = d.Write(want)
		}()
		got := make([]byte, 0, size)
		buf := make([]byte, 7919) // a prime, so reads never line up with writes
		for len(got) < size {
			n, err := a.Read(buf)
			if err != nil {
				t.Fatalf("%d bytes: read after %d: %v", size, len(got), err)
			}
			got = append(got, buf[:n]...)
		}
		wg.Wait()
		if werr != nil || wn != size {
			t.Fatalf("%d bytes: wrote %d, %v", size, wn, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: the bytes read differ from those written", size)
		}
	}
	// Both ways at once.
	var wg sync.WaitGroup
	for _, c := range []net.Conn{a, d} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Write(bytes.Repeat([]byte("x"), 4<<20)); err != nil {
				t.Errorf("write both ways: %v", err)
			}
		}()
	}
	for _, c := range []net.Conn{a, d} {
		if _, err := io.ReadFull(c, make([]byte, 4<<20)); err != nil {
			t.Fatalf("read both ways: %v", err)
		}
	}
	wg.Wait()
}

// TestRawConnEndsAsNetConnsDo: the peer's close is io.EOF; a read deadline
// is a timeout that errors.Is finds as os.ErrDeadlineExceeded, and clearing
// it reads again; a read blocked when its own connection closes returns
// net.ErrClosed; a write to a peer that reset the connection fails with
// the system call's error instead of hanging; a write deadline on a full
// socket is a timeout that says how much was written.
func TestRawConnEndsAsNetConnsDo(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		a, d := rawPair(t)
		_ = a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := a.Read(make([]byte, 10))
		var ne net.Error
		if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read past its deadline: %d, %v; want a timeout", n, err)
		}
		if oe := (*net.OpError)(nil); !errors.As(err, &oe) || oe.Op != "read" {
			t.Errorf("the deadline's error %#v: want a *net.OpError for read", err)
		}
		_ = a.SetReadDeadline(time.Time{})
		if _, err := d.Write([]byte("hi")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 10)
		if n, err := a.Read(buf); err != nil || string(buf[:n]) != "hi" {
			t.Fatalf("read after the deadline was cleared: %q, %v", buf[:n], err)
		}
	})
	t.Run("eof", func(t *testing.T) {
		a, d := rawPair(t)
		if _, err := d.Write([]byte("last")); err != nil {
			t.Fatal(err)
		}
		_ = d.Close()
		got, err := io.ReadAll(a)
		if err != nil || string(got) != "last" {
			t.Fatalf("read to the peer's close: %q, %v; want \"last\" and EOF", got, err)
		}
		if n, err := a.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("read after EOF: %d, %v", n, err)
		}
	})
	t.Run("closed under a read", func(t *testing.T) {
		a, _ := rawPair(t)
		done := make(chan error, 1)
		go func() {
			_, err := a.Read(make([]byte, 1))
			done <- err
		}()
		time.Sleep(20 * time.Millisecond)
		_ = a.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("a read whose connection closed: %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a read whose connection closed did not return")
		}
	})
	t.Run("reset", func(t *testing.T) {
		a, d := rawPair(t)
		_ = d.(*rawConn).SetLinger(0) // close sends RST
		_ = d.Close()
		var err error
		deadline := time.Now().Add(5 * time.Second)
		for err == nil && time.Now().Before(deadline) {
			_, err = a.Write([]byte("after the reset"))
		}
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("a write to a reset connection: %v, want ECONNRESET or EPIPE", err)
		}
	})
	t.Run("write deadline", func(t *testing.T) {
		a, _ := rawPair(t) // the peer never reads
		big := make([]byte, 64<<20)
		_ = a.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := a.Write(big)
		if !errors.Is(err, os.ErrDeadlineExceeded) || n <= 0 || n >= 64<<20 {
			t.Fatalf("a write past its deadline: %d bytes, %v; want some written and a timeout", n, err)
		}
	})
}

// TestRawConnThroughHTTP: an http.Server on the raw listener and an
// http.Transport dialing raw connections (the front door's two sides)
// carry requests, kept-alive, with bodies and a streamed answer, from
// many clients at once.
func TestRawConnThroughHTTP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/stream" {
			f := w.(http.Flusher)
			for i := range 20 {
				fmt.Fprintf(w, "data: %d %d\n\n", i, len(body))
				f.Flush()
			}
			return
		}
		w.Write(body)
	})}
	go srv.Serve(Listener(ln))
	defer srv.Close()
	// The front door's transport to its heads, as its server builds it.
	client := &http.Client{Transport: &http.Transport{
		DialContext:         Dialer(&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}),
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     3 * time.Second,
		DisableCompression:  true,
	}}
	defer client.CloseIdleConnections()
	url := "http://" + ln.Addr().String()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				body := strings.Repeat(string(rune('a'+i)), 1+j*4096)
				resp, err := client.Post(url+"/echo", "text/plain", strings.NewReader(body))
				if err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(got) != body {
					t.Errorf("client %d: echo of %d bytes came back as %d (%v)", i, len(body), len(got), err)
					return
				}
			}
			resp, err := client.Post(url+"/stream", "text/plain", strings.NewReader("xyz"))
			if err != nil {
				t.Errorf("client %d stream: %v", i, err)
				return
			}
			defer resp.Body.Close()
			sc, n := bufio.NewScanner(resp.Body), 0
			for sc.Scan() {
				if line := sc.Text(); line != "" {
					if want := fmt.Sprintf("data: %d 3", n); line != want {
						t.Errorf("client %d stream: %q, want %q", i, line, want)
						return
					}
					n++
				}
			}
			if n != 20 || sc.Err() != nil {
				t.Errorf("client %d stream: %d events, %v", i, n, sc.Err())
			}
		}()
	}
	wg.Wait()
}
