package httpapi

import (
	"crypto/subtle"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
)

const ctxPrincipal = "shop.principal"

// principal is who is calling: a user (UserID > 0) or the admin.
type principal struct {
	UserID int64
	Admin  bool
}

// String is the principal's idempotency scope.
func (p principal) String() string {
	if p.Admin {
		return "admin"
	}
	return "user:" + strconv.FormatInt(p.UserID, 10)
}

// authn signs demo-login user tokens (HS256 JWTs) and checks bearers.
type authn struct {
	secret []byte
	admin  []byte
	ttl    time.Duration
	quick  *tokenCheck // the library's verdict, cheaper, for the tokens issue signs
}

func newAuthn(secret, admin []byte, ttl time.Duration) *authn {
	return &authn{secret: secret, admin: admin, ttl: ttl, quick: newTokenCheck(secret)}
}

func (a *authn) issue(userID int64) (string, time.Time, error) {
	now := time.Now().UTC()
	exp := now.Add(a.ttl).Truncate(time.Second)
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject: strconv.FormatInt(userID, 10), IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
		Issuer: "shop",
	})
	s, err := tok.SignedString(a.secret)
	return s, exp, err
}

var errUnauthenticated = newError("unauthenticated", "a valid bearer token is required")

// identify reads the bearer: the admin token, or a valid user token.
func (a *authn) identify(c *gin.Context) (principal, error) {
	h := c.GetHeader("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return principal{}, errUnauthenticated
	}
	tok = strings.TrimSpace(tok)
	if subtle.ConstantTimeCompare([]byte(tok), a.admin) == 1 {
		return principal{Admin: true}, nil
	}
	if id, ok := a.quick.user(tok); ok {
		return principal{UserID: id}, nil
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return a.secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer("shop"), jwt.WithExpirationRequired())
	if err != nil {
		detail := "the token is malformed or badly signed"
		if errors.Is(err, jwt.ErrTokenExpired) {
			detail = "the token has expired"
		}
		return principal{}, newError("unauthenticated", detail)
	}
	id, err := strconv.ParseInt(claims.Subject, 10, 64)
	if err != nil || id <= 0 || id >= maxID {
		return principal{}, errUnauthenticated
	}
	return principal{UserID: id}, nil
}

// user lets only user tokens through; the admin token is 403.
func (a *authn) user() gin.HandlerFunc {
	return func(c *gin.Context) {
		p, err := a.identify(c)
		if err != nil {
			writeError(c, err)
			return
		}
		if p.Admin {
			writeError(c, newError("forbidden", "this route is for users; the admin token cannot use it"))
			return
		}
		c.Set(ctxPrincipal, p)
		c.Next()
	}
}

// admin lets only the admin token through; a user token is 403.
func (a *authn) adminOnly() gin.HandlerFunc {
	return func(c *gin.Context) {
		p, err := a.identify(c)
		if err != nil {
			writeError(c, err)
			return
		}
		if !p.Admin {
			writeError(c, newError("forbidden", "this route needs the admin token"))
			return
		}
		c.Set(ctxPrincipal, p)
		c.Next()
	}
}

func who(c *gin.Context) principal {
	p, _ := c.Get(ctxPrincipal)
	pp, _ := p.(principal)
	return pp
}
