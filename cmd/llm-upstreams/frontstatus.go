package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"slurm-llm/endpoints/front"
)

// frontStatusTimeout bounds asking the front door for its /status.
const frontStatusTimeout = 2 * time.Second

// writeFrontUsers prints, when the front door serves /status on addr
// ([front] metrics_listen), each tier's users now: requests on a head and
// waiting in the front door, most first. Nothing when addr is "" ; one
// line when the front door does not answer.
func writeFrontUsers(ctx context.Context, w io.Writer, addr string) {
	if addr == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, frontStatusTimeout)
	defer cancel()
	st, err := frontStatus(ctx, "http://"+addr+"/status")
	if err != nil {
		fmt.Fprintf(w, "\nFRONT DOOR (%s): not answering (%v)\n", addr, err)
		return
	}
	fmt.Fprintf(w, "\nFRONT DOOR (%s): users now\n", addr)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tUSER\tON A HEAD\tWAITING")
	for _, ts := range st.Tiers {
		if len(ts.Users) == 0 {
			fmt.Fprintf(tw, "%s\t-\t0\t0\n", ts.Tier)
		}
		for _, u := range ts.Users {
			name := u.User
			if name == "" {
				name = "(anonymous)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", ts.Tier, name, u.Serving, u.Waiting)
		}
	}
	_ = tw.Flush()
}

// frontStatus reads the front door's /status.
func frontStatus(ctx context.Context, url string) (front.Status, error) {
	var st front.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: %s", url, resp.Status)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&st)
	return st, err
}
