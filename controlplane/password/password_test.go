package password

import "testing"

func TestHashAndCheck(t *testing.T) {
	h, err := Hash("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := Check(h, "correct horse battery"); !ok || err != nil {
		t.Fatalf("right password refused: %v %v", ok, err)
	}
	if ok, _ := Check(h, "correct horse batterY"); ok {
		t.Fatal("wrong password accepted")
	}
	h2, _ := Hash("correct horse battery")
	if h == h2 {
		t.Fatal("two hashes of one password are equal: salt missing")
	}
	for _, bad := range []string{"", "$argon2id$v=19$m=1,t=1,p=1$$", "$bcrypt$x$y$z$w", h[:len(h)-3] + "!!!"} {
		if ok, _ := Check(bad, "x"); ok {
			t.Fatalf("malformed hash %q accepted", bad)
		}
	}
}
