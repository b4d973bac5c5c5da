package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"

	"github.com/gin-gonic/gin"
)

// validator is implemented by request bodies that check their own ranges.
type validator interface {
	validate() map[string]string
}

// decode reads the (already size-checked) JSON body into v strictly: not
// JSON -> invalid_json; unknown fields, wrong types or failed validation ->
// invalid_request with the fields at fault. An empty body decodes as {} when
// allowEmpty is set.
func decode(c *gin.Context, v any, allowEmpty bool) error {
	b := body(c)
	if len(bytes.TrimSpace(b)) == 0 {
		if !allowEmpty {
			return invalid(map[string]string{"body": "a JSON object is required"})
		}
		b = []byte("{}")
	} else if ct := c.GetHeader("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return invalid(map[string]string{"Content-Type": "must be application/json"})
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		return newError("invalid_json", "the body holds more than one JSON value")
	}
	if err == nil {
		if _, err2 := dec.Token(); err2 != io.EOF {
			return newError("invalid_json", "unexpected data after the JSON value")
		}
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
		return newError("invalid_json", "the body is not valid JSON: "+err.Error())
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return invalid(map[string]string{"body": "must be a JSON object"})
		}
		return invalid(map[string]string{field: fmt.Sprintf("must be %s", jsonKind(typ.Type.Kind().String()))})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid(map[string]string{name: "unknown field"})
	default:
		return newError("invalid_json", "the body is not valid JSON: "+err.Error())
	}
	if val, ok := v.(validator); ok {
		if fields := val.validate(); len(fields) > 0 {
			return invalid(fields)
		}
	}
	return nil
}

func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"), strings.HasPrefix(k, "float"):
		return "a number"
	case k == "string":
		return "a string"
	case k == "bool":
		return "a boolean"
	default:
		return "of type " + k
	}
}
