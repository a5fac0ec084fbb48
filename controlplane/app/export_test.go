package app

// CheckSchema is serve's schema check, for the tests of a schema a newer build migrated.
var CheckSchema = checkSchema
