// Package sourcetext reads the repository's Go source as text, for the tests that hold
// the docs to what the code spells (error codes, audit actions, environment variables).
// Tests only; nothing in a program imports it.
package sourcetext

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// File is one Go source file and its text.
type File struct{ Path, Text string }

// GoFiles is every .go file below each of dirs (relative to root), in the order
// filepath.WalkDir visits them; _test.go files only when tests is true. A directory
// that cannot be read fails the test.
func GoFiles(t testing.TB, root string, tests bool, dirs ...string) []File {
	t.Helper()
	var files []File
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || (!tests && strings.HasSuffix(path, "_test.go")) {
				return err
			}
			b, err := os.ReadFile(path)
			files = append(files, File{path, string(b)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(files) == 0 {
		t.Fatalf("no Go source below %v in %s", dirs, root)
	}
	return files
}
