package server

import _ "embed"

// openAPIDocument describes the /v1 routes; TestOpenAPIMatchesRoutes
// holds it to the routes the server registers, both ways.
//
//go:embed openapi.json
var openAPIDocument []byte
