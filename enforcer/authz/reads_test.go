package authz

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// The codec decodes of a CheckRequest only the fields on the path to what Check reads
// (its field-number constants). This holds the package's code to them: it calls no
// getter of a field the codec skips (a header besides those of checkHeaderNames is read
// through the headers map or header_map, so those two are read only in
// requestHeaders). Names are matched without types: a getter of the same name on
// another message is taken for the request's.
func TestCheckReadsOnlyWhatTheCodecDecodes(t *testing.T) {
	decoded := map[reflect.Type][]int{
		reflect.TypeFor[authv3.CheckRequest]():                 {checkRequestAttributes},
		reflect.TypeFor[authv3.AttributeContext]():             {attributesRequest, attributesRouteMeta},
		reflect.TypeFor[corev3.Metadata]():                     {metadataFilterMetadata},
		reflect.TypeFor[authv3.AttributeContext_Request]():     {requestHTTP},
		reflect.TypeFor[authv3.AttributeContext_HttpRequest](): {httpMethod, httpHeaders, httpPath, httpHost, httpHeaderMap, httpBody, httpRawBody},
	}
	skipped := map[string]bool{} // getters of fields the codec skips
	for typ, nums := range decoded {
		for f := range typ.Fields() {
			tag := strings.Split(f.Tag.Get("protobuf"), ",")
			if len(tag) < 2 {
				if f.Tag.Get("protobuf_oneof") != "" {
					t.Fatalf("%s.%s: a oneof; say how the codec treats it", typ.Name(), f.Name)
				}
				continue
			}
			num, err := strconv.Atoi(tag[1])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(nums, num) {
				skipped["Get"+f.Name] = true
			}
		}
	}
	if !skipped["GetScheme"] || !skipped["GetQuery"] || !skipped["GetSource"] {
		t.Fatalf("no getters found: %v", skipped)
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "codec.go" {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch m := sel.Sel.Name; {
				case skipped[m]:
					t.Errorf("%s: %s calls %s, a field the codec skips (decode it: codec.go)", fset.Position(call.Pos()), fn.Name.Name, m)
				case (m == "GetHeaders" || m == "GetHeaderMap") && fn.Name.Name != "requestHeaders":
					t.Errorf("%s: %s calls %s: read headers through requestHeaders, whose names the codec keeps",
						fset.Position(call.Pos()), fn.Name.Name, m)
				}
				return true
			})
		}
	}
}
