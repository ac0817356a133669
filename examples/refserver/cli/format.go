package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/csikit/csikit/csi"
)

// kvFlag collects repeated KEY=VALUE flags into a map.
type kvFlag map[string]string

func (f kvFlag) String() string {
	// Never print values: a -secret flag's default or error message
	// must not show one.
	return fmt.Sprintf("%d keys", len(f))
}

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		// The value may be a secret: name the key only.
		return fmt.Errorf("want KEY=VALUE, got a value without '=' (key %q)", k)
	}
	f[k] = v
	return nil
}

// capsFlag collects repeated ACCESS/ATTACHMENT capability flags.
type capsFlag []csi.Capability

func (f *capsFlag) String() string {
	parts := make([]string, len(*f))
	for i, c := range *f {
		parts[i] = c.String()
	}
	return strings.Join(parts, ",")
}

func (f *capsFlag) Set(s string) error {
	c, err := parseCapability(s)
	if err != nil {
		return err
	}
	*f = append(*f, c)
	return nil
}

// parseCapability parses "ACCESS[/ATTACHMENT]", for example
// "single-node-writer/file-system"; the attachment defaults to
// file-system.
func parseCapability(s string) (csi.Capability, error) {
	am, at, ok := strings.Cut(s, "/")
	if !ok {
		at = csi.AttachmentModeFileSystem.String()
	}
	a, err := parseAccessMode("-capability", am)
	if err != nil {
		return csi.Capability{}, err
	}
	t, err := parseAttachmentMode("-capability", at)
	if err != nil {
		return csi.Capability{}, err
	}
	c := csi.Capability{AccessMode: a, AttachmentMode: t}
	return c, c.Validate()
}

// table prints aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(anySlice(header)...)
	}
	return t
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

func (t *table) row(cols ...any) {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = fmt.Sprint(c)
		if parts[i] == "" {
			parts[i] = "-"
		}
	}
	fmt.Fprintln(t.tw, strings.Join(parts, "\t"))
}

func (t *table) flush() { _ = t.tw.Flush() }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func ratio(healthy, expected int) string { return fmt.Sprintf("%d/%d", healthy, expected) }

// bytesText prints a byte count in binary units.
func bytesText(n int64) string {
	if n <= 0 {
		return ""
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// ago prints how long before now t was, to the second.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String() + " ago"
}

func capsText(cs []csi.Capability) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, ", ")
}
