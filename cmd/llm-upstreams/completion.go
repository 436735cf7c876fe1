package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/template"
)

// tierForms are the forms of llm-upstreams tier.
var tierForms = []string{"disable", "enable", "scale", "grow", "handover"}

// runCompletion prints a completion script: `llm-upstreams completion
// bash` (source <(llm-upstreams completion bash), or save it as
// /usr/share/bash-completion/completions/llm-upstreams). Each command's
// flags are read from its own --help, so that completion and flags never
// drift apart.
func runCompletion(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] != "bash" {
		fmt.Fprintln(stderr, "usage: llm-upstreams completion bash")
		return exitUsage
	}
	type form struct{ Name, Flags string }
	var data struct {
		Commands         string
		Simple, Tier     []form
		Keep, KeepStatus string
	}
	data.Commands = strings.Join(commands, " ") + " keep tier key usage completion --version --help"
	for _, c := range commands {
		data.Simple = append(data.Simple, form{c, helpFlags(c)})
	}
	data.Simple = append(data.Simple, form{"usage", helpFlags("usage")},
		form{"key", "create list revoke generate " + helpFlags("key", "create")})
	data.Keep, data.KeepStatus = helpFlags("keep"), helpFlags("keep", "status")
	for _, f := range tierForms {
		data.Tier = append(data.Tier, form{f, helpFlags("tier", f, "NAME")})
	}
	if err := bashCompletion.Execute(stdout, data); err != nil {
		fmt.Fprintf(stderr, "llm-upstreams completion: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// helpFlags are the flags that `llm-upstreams ARGS --help` lists, space
// separated ("--config --json …").
func helpFlags(args ...string) string {
	var out bytes.Buffer
	run(append(args, "--help"), &out, io.Discard)
	var flags []string
	for _, line := range strings.Split(out.String(), "\n") {
		if name, ok := strings.CutPrefix(line, "  --"); ok {
			flags = append(flags, "--"+strings.Fields(name)[0])
		}
	}
	return strings.Join(flags, " ")
}

var bashCompletion = template.Must(template.New("bash").Parse(`# bash completion for llm-upstreams (llm-upstreams completion bash)
_llm_upstreams() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} words
	case $prev in
	--config|--keeper-config) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	--log-format) COMPREPLY=($(compgen -W "text json" -- "$cur")); return ;;
	--log-level) COMPREPLY=($(compgen -W "trace debug info warn error" -- "$cur")); return ;;
	esac
	if [[ $COMP_CWORD -eq 1 ]]; then
		COMPREPLY=($(compgen -W "{{.Commands}}" -- "$cur"))
		return
	fi
	case ${COMP_WORDS[1]} in
{{- range .Simple}}
	{{.Name}}) words="{{.Flags}}" ;;
{{- end}}
	keep)
		if [[ ${COMP_WORDS[2]} == status ]]; then words="{{.KeepStatus}}"
		elif [[ $COMP_CWORD -eq 2 ]]; then words="status {{.Keep}}"
		else words="{{.Keep}}"; fi ;;
	tier)
		case ${COMP_WORDS[2]} in
{{- range .Tier}}
		{{.Name}}) words="{{.Flags}}" ;;
{{- end}}
		*) words="{{range $i, $f := .Tier}}{{if $i}} {{end}}{{$f.Name}}{{end}}" ;;
		esac ;;
	completion) words="bash" ;;
	esac
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -F _llm_upstreams llm-upstreams
`))
