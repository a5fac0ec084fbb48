package streamoptions_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/streamoptions"
)

// BenchmarkRefuses is what every OpenAI chat stream pays to ask the memory: with no
// refusal remembered (the common case, no lock), and with a thousand.
func BenchmarkRefuses(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run(fmt.Sprint(n, "-remembered"), func(b *testing.B) {
			m := streamoptions.NewMemory(time.Now, time.Hour)
			for i := range n {
				m.Learn("api.example.com", fmt.Sprint("model-", i))
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if m.Refuses("api.example.com", "gpt-4o-mini") {
						b.Fatal("a refusal never learned is remembered")
					}
				}
			})
		})
	}
}
