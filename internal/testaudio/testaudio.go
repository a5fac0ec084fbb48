// Package testaudio holds audio files for tests: 2.5 s of sound in each container
// OpenAI's speech answers in (response_format mp3, opus, aac, flac, wav and pcm), made
// by make.sh with ffmpeg, and the duration ffmpeg decodes of each (durations.tsv), which
// tests of the audio meter (enforcer/audiolength) compare with, and which the fake
// provider of e2e answers speech with.
package testaudio

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"strconv"
	"strings"
)

//go:embed speech.* seekable.flac durations.tsv
var files embed.FS

// File is one fixture.
type File struct {
	Name string
	// ContentType is what a provider answers it with.
	ContentType string
	// Bytes are the file.
	Bytes []byte
	// DecodedMillis is the duration ffmpeg decodes of it, in milliseconds.
	DecodedMillis int64
}

// contentTypes are the fixtures by file name, with their media types (OpenAI's).
var contentTypes = map[string]string{
	"speech.mp3":    "audio/mpeg",
	"speech.opus":   "audio/opus",
	"speech.aac":    "audio/aac",
	"speech.flac":   "audio/flac",
	"seekable.flac": "audio/flac",
	"speech.wav":    "audio/wav",
	"speech.pcm":    "audio/pcm",
}

// All returns every fixture, by file name.
func All() (map[string]File, error) {
	tsv, err := files.ReadFile("durations.tsv")
	if err != nil {
		return nil, err
	}
	out := map[string]File{}
	sc := bufio.NewScanner(bytes.NewReader(tsv))
	for sc.Scan() {
		name, ms, ok := strings.Cut(sc.Text(), "\t")
		n, err := strconv.ParseInt(ms, 10, 64)
		if !ok || err != nil || contentTypes[name] == "" {
			return nil, fmt.Errorf("testaudio: durations.tsv: bad line %q", sc.Text())
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		out[name] = File{Name: name, ContentType: contentTypes[name], Bytes: b, DecodedMillis: n}
	}
	if len(out) != len(contentTypes) {
		return nil, fmt.Errorf("testaudio: durations.tsv lists %d files, want %d", len(out), len(contentTypes))
	}
	return out, nil
}

// Speech returns the fixture OpenAI's speech answers in for a response_format ("" is
// mp3, its default), and whether there is one.
func Speech(format string) (File, bool) {
	if format == "" {
		format = "mp3"
	}
	all, err := All()
	if err != nil {
		return File{}, false
	}
	f, ok := all["speech."+format]
	return f, ok
}
