package demo

import "testing"

func TestUnescapeMountinfo(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/plain/path", "/plain/path"},
		{`/with\040space`, "/with space"},
		{`/tab\011and\012newline`, "/tab\tand\nnewline"},
		{`/back\134slash`, `/back\slash`},
		{`/not\08octal`, `/not\08octal`},
		{`/short\04`, `/short\04`},
		{`/trailing\`, `/trailing\`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := unescapeMountinfo(tt.in); got != tt.want {
				t.Errorf("unescapeMountinfo(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
