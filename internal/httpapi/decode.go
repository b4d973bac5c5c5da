package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"reflect"
	"strings"

	"github.com/gin-gonic/gin"
)

// validator is implemented by request bodies that check their own ranges.
type validator interface {
	validate() map[string]string
}

// bodyRule says what an empty body means to decode.
type bodyRule bool

const (
	bodyRequired bodyRule = false // an empty body is invalid_request
	bodyOptional bodyRule = true  // an empty body decodes as {}
)

// decode reads the (already size-checked) JSON body into v strictly: not
// JSON -> invalid_json; unknown fields, wrong types or failed validation ->
// invalid_request with the fields at fault. An empty body is refused or read
// as {}, as rule says.
func decode(c *gin.Context, v any, rule bodyRule) error {
	b := body(c)
	if len(bytes.TrimSpace(b)) == 0 {
		if rule == bodyRequired {
			return invalid(map[string]string{"body": "a JSON object is required"})
		}
		// Read as {}, which sets no field of v's struct: only its own
		// checks are left (most seckill requests have no body).
		return validated(v)
	} else if ct := c.GetHeader("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return invalid(map[string]string{"Content-Type": "must be application/json"})
		}
	}
	if json.Valid(b) {
		if err := checkKeys(b, v); err != nil {
			return err
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
		return newError("invalid_json", "the body is not valid JSON: "+strings.TrimPrefix(err.Error(), "json: "))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return invalid(map[string]string{"body": "must be a JSON object"})
		}
		return invalid(map[string]string{field: typeProblem(typ)})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid(map[string]string{name: "unknown field"})
	default:
		return newError("invalid_json", "the body is not valid JSON: "+strings.TrimPrefix(err.Error(), "json: "))
	}
	return validated(v)
}

// validated runs v's own checks, if it has any.
func validated(v any) error {
	if val, ok := v.(validator); ok {
		if fields := val.validate(); len(fields) > 0 {
			return invalid(fields)
		}
	}
	return nil
}

// checkKeys holds a valid JSON body to what encoding/json lets through: the
// body must be an object, no object may repeat a key, and the top-level keys
// must be v's field names exactly (encoding/json matches them ignoring case,
// and the last of two duplicates wins, so {"quantity":1,"QUANTITY":5} would
// mean 5).
func checkKeys(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, _ := dec.Token(); t != json.Delim('{') {
		return invalid(map[string]string{"body": "must be a JSON object"})
	}
	names := fieldNames(v)
	var walk func(top bool) error // after an opening '{', through its '}'
	walk = func(top bool) error {
		seen := map[string]bool{}
		for dec.More() {
			t, err := dec.Token()
			if err != nil {
				return newError("invalid_json", "the body is not valid JSON")
			}
			k, _ := t.(string)
			if seen[k] {
				return invalid(map[string]string{k: "duplicate key"})
			}
			seen[k] = true
			if top && !names[k] {
				return invalid(map[string]string{k: "unknown field (field names are case-sensitive)"})
			}
			if err := skipValue(dec, walk); err != nil {
				return err
			}
		}
		_, err := dec.Token() // '}'
		return err
	}
	return walk(true)
}

// skipValue reads one value, walking the objects in it.
func skipValue(dec *json.Decoder, walk func(top bool) error) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	switch t {
	case json.Delim('{'):
		return walk(false)
	case json.Delim('['):
		for dec.More() {
			if err := skipValue(dec, walk); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
	}
	return err
}

// fieldNames are the JSON names of the fields of the struct v points to.
func fieldNames(v any) map[string]bool {
	names := map[string]bool{}
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return names
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	return names
}

// typeProblem words a value of the wrong type; an integer field given
// 1e3, 1.5 or a number beyond 64 bits is told so, not "must be a number".
func typeProblem(typ *json.UnmarshalTypeError) string {
	k := typ.Type.Kind().String()
	if (strings.HasPrefix(k, "int") || strings.HasPrefix(k, "uint")) && strings.HasPrefix(typ.Value, "number") {
		return "must be an integer written without a fraction or exponent, within range"
	}
	if strings.HasPrefix(k, "int") || strings.HasPrefix(k, "uint") {
		return "must be an integer"
	}
	return "must be " + jsonKind(k)
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
