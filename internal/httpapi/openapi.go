package httpapi

import (
	_ "embed"

	"github.com/gin-gonic/gin"
)

// openapiJSON is the OpenAPI 3 document of the API; a test validates it and
// checks it lists exactly the router's routes.
//
//go:embed openapi.json
var openapiJSON []byte

func openAPI(c *gin.Context) {
	c.Header("Content-Type", "application/json")
	c.Status(200)
	_, _ = c.Writer.Write(openapiJSON)
}
