package store

// MirroredMembersSQL is MirroredMembers' query, for its plan's test.
const MirroredMembersSQL = mirroredMembersSQL
