// Package typeid owns the format of Tollgate's public identifiers: TypeIDs of
// the form "<prefix>_<26 lowercase Crockford base32 characters>".
//
// It generates new ids (UUIDv7-style, so they sort roughly by creation time),
// parses them back to their 128-bit payload and checks that a string is an id
// of one expected kind, with an error message fit for an API response.
//
// It must not know anything about storage, HTTP or the resources the ids name:
// it only says whether a string is a well-formed id of a given prefix. It must
// never accept a second spelling of the same id (upper case, Crockford aliases
// such as "i", "l", "o", or a suffix wider than 128 bits), because ids are
// compared as plain strings everywhere else.
package typeid
