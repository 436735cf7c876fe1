package usage

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// By is what a report groups by.
type By string

// The groupings of `llm-upstreams usage --by`.
const (
	ByUser    By = "user" // a row per user and account (sreport's Login, Account)
	ByAccount By = "account"
	ByModel   By = "model" // a row per model and tier
	ByTier    By = "tier"
)

// ParseBy reads --by.
func ParseBy(s string) (By, error) {
	switch b := By(s); b {
	case ByUser, ByAccount, ByModel, ByTier:
		return b, nil
	}
	return "", fmt.Errorf("--by %q: want user, account, model or tier", s)
}

// Row is one group's use over the report's window.
type Row struct {
	// The grouping's columns: User and Account (by user), Account (by
	// account), Model and Tier (by model), Tier (by tier); "" is shown as
	// "-" (anonymous, or not known).
	User    string `json:"user,omitempty"`
	Account string `json:"account,omitempty"`
	Model   string `json:"model,omitempty"`
	Tier    string `json:"tier,omitempty"`
	// Requests counts them; Errors those that got no answer from a head
	// (a status of 400 or more, or an outcome other than answered or
	// backup).
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
	// PromptTokens and CompletionTokens are the sums of what the heads
	// reported.
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// HeldSeconds and ServedSeconds are the sums of the requests' times.
	HeldSeconds   float64 `json:"held_seconds"`
	ServedSeconds float64 `json:"served_seconds"`
}

// Tokens is prompt and completion tokens together.
func (r Row) Tokens() int64 { return r.PromptTokens + r.CompletionTokens }

// Report is the use over a window, grouped, with what was lost.
type Report struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	By    By        `json:"by"`
	// Rows are sorted by tokens, most first (then by their columns).
	Rows  []Row `json:"rows"`
	Total Row   `json:"total"`
	// Dropped counts records that never reached the database in the
	// window; UncleanStops the recorder's stops that may each have lost
	// up to LostPerStop records.
	Dropped      int64 `json:"dropped"`
	UncleanStops int64 `json:"unclean_stops"`
	LostPerStop  int64 `json:"lost_per_stop,omitempty"`
}

// groupColumns are the SQL columns of each grouping.
var groupColumns = map[By][]string{ByUser: {"user", "account"}, ByAccount: {"account"}, ByModel: {"model", "tier"}, ByTier: {"tier"}}

// Summarize reads the use from since to until (exclusive) grouped by by.
func Summarize(ctx context.Context, db *sql.DB, by By, since, until time.Time) (Report, error) {
	cols, ok := groupColumns[by]
	if !ok {
		return Report{}, fmt.Errorf("summarize usage: unknown grouping %q", by)
	}
	rep := Report{Since: since, Until: until, By: by, Rows: []Row{}}
	group := strings.Join(cols, ", ")
	q := `SELECT ` + group + `, COUNT(*),
		SUM(CASE WHEN status >= 400 OR outcome NOT IN ('answered', 'backup') THEN 1 ELSE 0 END),
		SUM(prompt_tokens), SUM(completion_tokens), SUM(held_ms), SUM(served_ms)
		FROM requests WHERE time >= ? AND time < ? GROUP BY ` + group + `
		ORDER BY SUM(prompt_tokens) + SUM(completion_tokens) DESC, ` + group
	rows, err := db.QueryContext(ctx, q, since.UnixMilli(), until.UnixMilli())
	if err != nil {
		return Report{}, fmt.Errorf("summarize usage: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r Row
		var held, served int64
		dst := map[string]*string{"user": &r.User, "account": &r.Account, "model": &r.Model, "tier": &r.Tier}
		scan := make([]any, 0, len(cols)+6)
		for _, c := range cols {
			scan = append(scan, dst[c])
		}
		scan = append(scan, &r.Requests, &r.Errors, &r.PromptTokens, &r.CompletionTokens, &held, &served)
		if err := rows.Scan(scan...); err != nil {
			return Report{}, fmt.Errorf("summarize usage: %w", err)
		}
		r.HeldSeconds, r.ServedSeconds = float64(held)/1000, float64(served)/1000
		rep.Rows = append(rep.Rows, r)
		rep.Total.add(r)
	}
	if err := rows.Err(); err != nil {
		return Report{}, fmt.Errorf("summarize usage: %w", err)
	}
	err = db.QueryRowContext(ctx, `SELECT COALESCE(SUM(CASE WHEN records > 0 THEN records ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN records < 0 THEN 1 ELSE 0 END), 0), COALESCE(MAX(-records), 0)
		FROM losses WHERE time >= ? AND time < ?`, since.UnixMilli(), until.UnixMilli()).Scan(&rep.Dropped, &rep.UncleanStops, &rep.LostPerStop)
	if err != nil {
		return Report{}, fmt.Errorf("summarize usage losses: %w", err)
	}
	rep.LostPerStop = max(rep.LostPerStop, 0)
	return rep, nil
}

func (t *Row) add(r Row) {
	t.Requests += r.Requests
	t.Errors += r.Errors
	t.PromptTokens += r.PromptTokens
	t.CompletionTokens += r.CompletionTokens
	t.HeldSeconds += r.HeldSeconds
	t.ServedSeconds += r.ServedSeconds
}

// headers are the grouping columns' titles, as sreport names them.
var headers = map[string]string{"user": "Login", "account": "Account", "model": "Model", "tier": "Tier"}

// WriteReport prints rep as JSON, or as a table shaped like sreport's: a
// banner with the window, then one right-aligned row per group.
func WriteReport(w io.Writer, rep Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	line := strings.Repeat("-", 80)
	secs := int64(rep.Until.Sub(rep.Since).Seconds())
	fmt.Fprintf(w, "%s\nUsage by %s %s - %s (%d secs)\nTokens reported as counts, times in seconds\n%s\n", line, rep.By,
		rep.Since.Format("2006-01-02T15:04:05"), rep.Until.Format("2006-01-02T15:04:05"), secs, line)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	cols := groupColumns[rep.By]
	var title, rule []string
	for _, c := range cols {
		title = append(title, headers[c])
	}
	title = append(title, "Requests", "Errors", "Prompt", "Completion", "Tokens", "Percent", "Held", "Served")
	for _, t := range title {
		rule = append(rule, strings.Repeat("-", max(len(t), 9)))
	}
	fmt.Fprintln(tw, strings.Join(title, "\t")+"\t")
	fmt.Fprintln(tw, strings.Join(rule, "\t")+"\t")
	for _, r := range rep.Rows {
		var f []string
		for _, c := range cols {
			f = append(f, dash(map[string]string{"user": r.User, "account": r.Account, "model": r.Model, "tier": r.Tier}[c]))
		}
		pct := 0.0
		if rep.Total.Tokens() > 0 {
			pct = 100 * float64(r.Tokens()) / float64(rep.Total.Tokens())
		}
		f = append(f, fmt.Sprint(r.Requests), fmt.Sprint(r.Errors), fmt.Sprint(r.PromptTokens), fmt.Sprint(r.CompletionTokens),
			fmt.Sprint(r.Tokens()), fmt.Sprintf("%.2f%%", pct), fmt.Sprintf("%.1f", r.HeldSeconds), fmt.Sprintf("%.1f", r.ServedSeconds))
		fmt.Fprintln(tw, strings.Join(f, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.Dropped > 0 || rep.UncleanStops > 0 {
		fmt.Fprintf(w, "\nNot in the table: %d records dropped (queue full or database failing); %d unclean stops of the recorder, each losing at most %d records\n",
			rep.Dropped, rep.UncleanStops, rep.LostPerStop)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
