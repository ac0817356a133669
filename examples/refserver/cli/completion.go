package cli

import (
	"fmt"
	"slices"
	"strings"
)

// completionScripts are the shell completion scripts: CMDS and SUBS
// are filled from the command table, and flags are read from the
// command's own -h, so they are always the binary's.
var completionScripts = map[string]string{
	"bash": `# bash completion for refserver: source it, or install it as
# /etc/bash_completion.d/refserver (refserver completion bash > …)
_refserver() {
    local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} sub= subs=
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "CMDS" -- "$cur")); return
    fi
    case "$cmd" in
SUBS
    esac
    if [ "$COMP_CWORD" -eq 2 ] && [ -n "$subs" ]; then
        COMPREPLY=($(compgen -W "$subs" -- "$cur")); return
    fi
    [ -n "$subs" ] && sub=${COMP_WORDS[2]}
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" $cmd $sub -h 2>/dev/null | awk '/^  -/{print $1}')" -- "$cur"))
    fi
}
complete -F _refserver refserver
`,
	"zsh": `#compdef refserver
# zsh completion for refserver: put it in a directory of $fpath as
# _refserver (refserver completion zsh > …), then compinit
_refserver() {
    local cmd=${words[2]} sub= subs=
    if (( CURRENT == 2 )); then
        compadd -- CMDS; return
    fi
    case "$cmd" in
SUBS
    esac
    if (( CURRENT == 3 )) && [[ -n "$subs" ]]; then
        compadd -- ${=subs}; return
    fi
    [[ -n "$subs" ]] && sub=${words[3]}
    if [[ "${words[CURRENT]}" == -* ]]; then
        compadd -- $(${words[1]} $cmd $sub -h 2>/dev/null | awk '/^  -/{print $1}')
    fi
}
compdef _refserver refserver
`,
}

// modes are the top-level commands that are not groups of subcommands;
// completion offers them and every group of env.groups.
var modes = []string{"demo", "server", "agent", "claim", "release", "version", "completion", "help"}

func (e *env) completion(args []string) int {
	fs := e.modeFlags("completion", "Prints a completion script for bash or zsh. Subcommands come from the command table and flags from each command's -h.",
		"source <(refserver completion bash)")
	if wantsHelp(args) {
		printHelp(fs, e.stdout)
		return ExitOK
	}
	if len(args) != 1 || completionScripts[args[0]] == "" {
		fmt.Fprintf(e.stderr, "refserver completion: give the shell: bash or zsh\n%s", helpHint(fs))
		return ExitUsage
	}
	groups := e.groups()
	var subs strings.Builder
	for _, g := range slicesSorted(groups) {
		var names []string
		for _, c := range groups[g] {
			names = append(names, c.name)
		}
		fmt.Fprintf(&subs, "        %s) subs=%q ;;\n", g, strings.Join(names, " "))
	}
	cmds := append(slices.Clone(modes), slicesSorted(groups)...)
	s := strings.ReplaceAll(completionScripts[args[0]], "CMDS", strings.Join(cmds, " "))
	s = strings.Replace(s, "SUBS\n", subs.String(), 1)
	fmt.Fprint(e.stdout, s)
	return ExitOK
}

func slicesSorted[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
