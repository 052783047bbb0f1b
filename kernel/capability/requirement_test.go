package capability

import "testing"

func TestVersionCompare(t *testing.T) {
	tests := []struct {
		a, b Version
		want int
	}{
		{V(6, 1, 0), V(6, 1, 0), 0},
		{V(6, 1, 0), V(6, 12, 0), -1},
		{V(5, 14, 0), V(4, 19, 300), 1},
		{V(6, 18, 44), V(6, 18, 9), 1},
		{V(3, 16, 0), V(3, 16, 1), -1},
	}
	for _, tc := range tests {
		if got := tc.a.Compare(tc.b); got != tc.want {
			t.Errorf("%v.Compare(%v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := tc.b.Compare(tc.a); got != -tc.want {
			t.Errorf("%v.Compare(%v) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
		if got := tc.a.AtLeast(tc.b); got != (tc.want >= 0) {
			t.Errorf("%v.AtLeast(%v) = %v", tc.a, tc.b, got)
		}
	}
	if !(Version{}).IsZero() || V(0, 0, 1).IsZero() {
		t.Error("IsZero")
	}
}
