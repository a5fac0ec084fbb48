// Package money owns Tollgate's representation of amounts: integer micro-USD
// (1 USD = 1,000,000 micro-USD) held in an int64.
//
// It converts the decimal USD strings of the API (costUsd) to micro-USD and
// back exactly, computes the size of an extension (ceil(base/4)) and adds
// counters with overflow detection.
//
// It must never use floating point: amounts are summed across many requests
// and a rounding error would show up as a wrong charge. It must not silently
// wrap on overflow either; callers roll back the whole transaction on
// ErrOverflow. It knows nothing about policies, windows or storage.
package money
