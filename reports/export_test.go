package reports

// NiceTicks is niceTicks for the external tests.
var NiceTicks = niceTicks
