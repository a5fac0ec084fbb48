// Package secrettest holds passwords that break a URL's syntax, for the tests that start
// a program with them in TOLLGATE_DATABASE_URL or TOLLGATE_REDIS_URL and check that no
// part of them reaches its output. Tests only; nothing in a program imports it.
package secrettest

import (
	"regexp"
	"strings"
)

// Passwords are written into URLs as they are, unencoded: each has a character a URL
// gives a meaning ('@', '/', '?', '#', '%', ' ', '&', ':'), or a digit first, which a
// reader cutting the password there takes for a port. The letters around them are
// distinct parts (Leaks looks for each): a reader may cut anywhere. A part a reader
// could take for a host name ends in '~', which no host name has, so that the test's
// connection fails at once rather than wait for a DNS server's answer; the user name of
// a test's URL should have one too ("1/Zk9" reads as host USER, port 1).
var Passwords = []string{
	"Qa7@Zk9",
	"Qa7@Zk9@Xm3",
	"Qa7@Zk9~/Xm3",
	"Qa7@Zk9~?Xm3",
	"Qa7@Zk9~#Xm3",
	"Qa7/Zk9",
	"Qa7?Zk9",
	"Qa7#Zk9",
	"Qa7%Zk9",
	"Qa7%zzZk9",
	"Qa7 Zk9",
	"Qa7:Zk9",
	"Qa7&Zk9=Xm3",
	"1/Zk9",
	"1?Zk9",
	"1#Zk9",
	"1@Zk9~/Xm3",
}

// part is a piece of a password that nothing else in a program's output spells.
var part = regexp.MustCompile(`[A-Za-z][0-9A-Za-z]+`)

// Leaks lists the parts of password found in out.
func Leaks(out, password string) []string {
	var found []string
	for _, p := range part.FindAllString(password, -1) {
		if strings.Contains(out, p) {
			found = append(found, p)
		}
	}
	return found
}
