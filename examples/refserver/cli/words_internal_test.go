package cli

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1024", 1024, true},
		{"1GiB", 1 << 30, true},
		{"1Gi", 1 << 30, true},
		{"1gib", 1 << 30, true},
		{"500M", 500e6, true},
		{"500MB", 500e6, true},
		{"1.5G", 1.5e9, true},
		{"2 TiB", 2 << 40, true},
		{"10B", 10, true},
		{"", 0, false},
		{"G", 0, false},
		{"1XB", 0, false},
		{"-1G", 0, false},
		{"1e3", 0, false},
		{"99999999999TiB", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSize(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("parseSize(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}
