package sourcetext

import (
	"strings"
	"testing"
)

func TestGoFilesReadsSourceAndTestsOnlyWhenAsked(t *testing.T) {
	has := func(files []File, name string) bool {
		for _, f := range files {
			if strings.HasSuffix(f.Path, name) {
				return strings.Contains(f.Text, "package sourcetext")
			}
		}
		return false
	}
	src := GoFiles(t, "..", false, "sourcetext")
	if !has(src, "sourcetext.go") || has(src, "sourcetext_test.go") {
		t.Errorf("without tests: %d files, want sourcetext.go alone", len(src))
	}
	if all := GoFiles(t, "..", true, "sourcetext"); !has(all, "sourcetext_test.go") || !has(all, "sourcetext.go") {
		t.Errorf("with tests: %d files, want both", len(all))
	}
}
