package ledger

// SlowBatch is slowBatch, for the tests of package ledger_test.
const SlowBatch = slowBatch

// DataRefusal is dataRefusal, for the tests of package ledger_test.
var DataRefusal = dataRefusal
