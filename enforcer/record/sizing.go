package record

// HeapBytesPerKnownRecord is the heap the reader holds for each member whose record it
// keeps (Config.LastKnown of them at most), for sizing an enforcer (enforcer/app's
// HeapBytesPerMember): the record decoded, with policy names of the longest allowed
// (120 characters) and its organization's price keys shared, and the sum that tells it
// unchanged (BenchmarkLastKnownRecordBytes). TestAKeptRecordFitsItsBudget holds the
// measurement to it.
const HeapBytesPerKnownRecord = 2100
