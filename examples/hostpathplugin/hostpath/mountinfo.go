package hostpath

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// mountPoints returns the mount point field (the fifth) of every line of
// a /proc/<pid>/mountinfo file, unescaped. See proc(5): the fields are
// separated by spaces, and the kernel writes a space, tab, newline or
// backslash inside a path as a backslash and three octal digits.
func mountPoints(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("mountinfo line %d has %d fields, want at least 5: %q", n, len(f), line)
		}
		out = append(out, unescapeMountinfo(f[4]))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return out, nil
}

// unescapeMountinfo undoes the kernel's octal escapes ("\040" for a
// space). A backslash not followed by three octal digits is kept as is.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && isOctalAt(s, i+1, 3) && s[i+1] <= '3' { // at most \377
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctalAt(s string, i, n int) bool {
	if i+n > len(s) {
		return false
	}
	for j := i; j < i+n; j++ {
		if s[j] < '0' || s[j] > '7' {
			return false
		}
	}
	return true
}
