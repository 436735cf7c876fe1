package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
)

// modelList is the part of llama-server's /v1/models answer we read: the
// OpenAI shape (data[].id) and llama.cpp's own (models[].name or .model).
type modelList struct {
	Data []struct {
		ID string `json:"id"`
	} `json:"data"`
	Models []struct {
		Name  string `json:"name"`
		Model string `json:"model"`
	} `json:"models"`
}

// Models returns the names of the models the head serves, from its
// /v1/models: sorted, without duplicates or empty names.
func Models(ctx context.Context, client *http.Client, baseURL string) ([]string, error) {
	body, err := getOK(ctx, client, baseURL+"/v1/models")
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	var l modelList
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("list models: decode: %w", err)
	}
	seen := map[string]bool{}
	var names []string
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, d := range l.Data {
		add(d.ID)
	}
	for _, m := range l.Models {
		add(m.Name)
		if m.Name == "" {
			add(m.Model)
		}
	}
	sort.Strings(names)
	return names, nil
}
