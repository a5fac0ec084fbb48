// Package plugin owns the rules of a plugin's extension manifest: the checks the
// specification sets (schemaVersion 1, the lengths of id, name and description, the
// source enums, the required resources array, the optional contributions, setup and
// lifecycle) plus the few limits that make a manifest storable as Postgres jsonb.
//
// It is pure: it reads bytes and reports problems with the JSON path of each, and never
// touches HTTP or storage. It does not rewrite a manifest: callers store the bytes they
// were given, so properties the rules do not name are kept as they came.
//
// Rules of ours, beyond the specification, each because Postgres jsonb (or any sane
// consumer) cannot hold the document otherwise:
//   - the document is valid UTF-8 and exactly one JSON object;
//   - no object repeats a key (parsers disagree on which copy wins);
//   - no string or key contains U+0000 or an unpaired UTF-16 surrogate escape;
//   - containers nest at most MaxDepth levels;
//   - a number literal has at most MaxNumberLen characters and an exponent of at most
//     MaxExponent in size.
package plugin
