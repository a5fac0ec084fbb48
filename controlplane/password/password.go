// Package password hashes and checks user passwords with argon2id. It owns the encoded
// hash format; it never logs or returns a password.
package password

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Params are argon2id costs. Default follows the OWASP minimum (19 MiB, 2 passes).
type Params struct {
	Memory  uint32 // KiB
	Time    uint32
	Threads uint8
}

// Default is what new hashes use.
var Default = Params{Memory: 19 * 1024, Time: 2, Threads: 1}

// MinLength is the shortest password accepted at sign-up.
const MinLength = 12

// MaxLength is the longest password (in characters) accepted at sign-up and by
// bootstrap-admin: it bounds the work of one hash, and sign-in refuses what is longer
// than any password that can be set.
const MaxLength = 1024

// Hash returns the encoded argon2id hash of pw.
func Hash(pw string) (string, error) {
	return HashWith(pw, Default)
}

// HashWith hashes with explicit parameters.
func HashWith(pw string, p Params) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(pw), salt, p.Time, p.Memory, p.Threads, 32)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key)), nil
}

var errFormat = errors.New("password: malformed hash")

// Check tells whether pw matches the encoded hash, in constant time.
func Check(encoded, pw string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, errFormat
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, errFormat
	}
	var p Params
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &p.Threads); err != nil {
		return false, errFormat
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		return false, errFormat
	}
	want, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false, errFormat
	}
	got := argon2.IDKey([]byte(pw), salt, p.Time, p.Memory, p.Threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// dummyHash is checked against when the user does not exist, so a sign-in for an unknown
// email costs the same time as a wrong password and does not reveal who has an account.
var dummyHash, _ = Hash("tollgate-timing-equalizer")

// CheckMissing spends the time of one Check and always answers false.
func CheckMissing(pw string) {
	_, _ = Check(dummyHash, pw)
}
