#!/bin/sh
# Makes the audio fixtures of package testaudio with ffmpeg (Debian's package), and
# writes durations.tsv with the duration ffmpeg decodes from each (its samples, at 24 kHz
# mono, in milliseconds): the tests compare the meter with that. The sound is 2.5 s of a wavering tone over noise at 24 kHz mono, the rate of
# OpenAI's speech. Each file is written to a pipe, as a provider streams it (no header
# is rewritten at the end: a WAV's sizes and a FLAC's total stay unknown), except
# seekable.flac, written to a file, whose STREAMINFO gives the total.
# Run: sh make.sh (from this directory).
set -eu
src="-f lavfi -i sine=frequency=220:beep_factor=3:sample_rate=24000:duration=2.5 -f lavfi -i anoisesrc=color=pink:amplitude=0.05:seed=7:sample_rate=24000:duration=2.5 -filter_complex amix=inputs=2:duration=shortest -ac 1 -ar 24000"
ff() { out=$1; shift; ffmpeg -hide_banner -loglevel error -y $src "$@" pipe:1 > "$out"; }
ff speech.mp3 -c:a libmp3lame -b:a 64k -f mp3
ff speech.opus -c:a libopus -b:a 32k -f ogg
ff speech.aac -c:a aac -b:a 64k -f adts
ff speech.flac -c:a flac -f flac
ff speech.wav -c:a pcm_s16le -f wav
ff speech.pcm -c:a pcm_s16le -f s16le
ffmpeg -hide_banner -loglevel error -y $src -c:a flac seekable.flac
: > durations.tsv
for f in speech.mp3 speech.opus speech.aac speech.flac speech.wav seekable.flac speech.pcm; do
	in="-i $f"
	[ "$f" = speech.pcm ] && in="-f s16le -ar 24000 -ac 1 -i $f"
	bytes=$(ffmpeg -hide_banner -loglevel error $in -ac 1 -ar 24000 -f s16le pipe:1 | wc -c)
	printf '%s\t%s\n' "$f" $((bytes / 48)) >> durations.tsv
done
