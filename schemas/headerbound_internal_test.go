package schemas

import (
	"strings"
	"testing"
)

// controlChar tests eight bytes at a time: every byte value, at every offset of values long
// enough for several words and after every kind of neighbour, must give what a byte-by-byte
// reading of the rule gives.
func TestControlCharAgreesByteByByte(t *testing.T) {
	// The rule read rune by rune: a byte that is not UTF-8 reads as U+FFFD, not a control.
	want := func(v string) (int, rune) {
		for i, r := range v {
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
				return i, r
			}
		}
		return -1, 0
	}
	for c := 0; c < 256; c++ {
		for _, next := range []string{"", "\x80", "\x9f", "\xa0", "a"} {
			for at := 0; at < 20; at++ {
				v := strings.Repeat("a", at) + string([]byte{byte(c)}) + next + strings.Repeat("b", 9)
				gi, gr := controlChar(v)
				wi, wr := want(v)
				if gi != wi || gr != wr {
					t.Fatalf("controlChar(%q) = %d, %U; want %d, %U", v, gi, gr, wi, wr)
				}
			}
		}
	}
}
