package httpapi

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/shop/internal/labrace"
)

// The lab race is the demo page's flash sale: POST /api/v1/admin/lab/races
// starts N simulated buyers, each a distinct demo user, that send real HTTP
// requests to this instance's own listen address; GET .../races/{id} is its
// progress. The races themselves are internal/labrace's; these handlers
// decode the requests and encode its views. The page polls: a browser's
// EventSource cannot send the admin bearer token, and a token in a URL ends
// up in logs.

// SelfURL is the base URL at which a server listening on addr reaches
// itself: an unspecified host (":8080") becomes the loopback address.
func SelfURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port))
}

// labRoutes are the lab's handlers over this instance's races.
type labRoutes struct {
	a   *api
	lab *labrace.Lab
}

func newLab(a *api, d Deps) *labRoutes {
	return &labRoutes{a: a, lab: labrace.New(labrace.Config{
		Stock: a.products, Audit: labrace.Auditor(a.audit), Log: d.Log, Background: d.Background,
		SelfURL: d.SelfURL, Switches: d.LabSwitches, AdminToken: d.AdminToken,
	})}
}

type raceRequest struct {
	ProductID   *int64   `json:"product_id"`
	Stock       *int64   `json:"stock"`
	Buyers      *int     `json:"buyers"`
	Concurrency *int     `json:"concurrency"`
	Strategies  []string `json:"strategies"`
}

func (r raceRequest) validate() map[string]string {
	f := map[string]string{}
	switch {
	case r.Buyers == nil:
		f["buyers"] = "required"
	case *r.Buyers < 1 || *r.Buyers > labrace.MaxBuyers:
		f["buyers"] = fmt.Sprintf("must be between 1 and %d", labrace.MaxBuyers)
	}
	switch {
	case r.ProductID == nil && r.Stock == nil:
		f["stock"] = "required when product_id is absent (the race then sells a new product)"
	case r.ProductID != nil && r.Stock != nil:
		f["stock"] = "give product_id (race an existing product) or stock (race a new one), not both"
	case r.ProductID != nil && (*r.ProductID <= 0 || *r.ProductID >= maxID):
		f["product_id"] = "must be a positive integer"
	case r.Stock != nil && (*r.Stock < 1 || *r.Stock > 1_000_000):
		f["stock"] = "must be between 1 and 1000000"
	}
	if r.Concurrency != nil && (*r.Concurrency < 1 || *r.Concurrency > labrace.MaxConcurrency) {
		f["concurrency"] = fmt.Sprintf("must be between 1 and %d", labrace.MaxConcurrency)
	}
	switch {
	case r.Strategies == nil:
	case len(r.Strategies) < 1 || len(r.Strategies) > 2:
		f["strategies"] = "one or two stock strategies, one per side of the race"
	case r.ProductID != nil:
		f["strategies"] = "each side races a new product of its own: leave product_id out"
	default:
		for _, s := range r.Strategies {
			if !slices.Contains(labrace.Strategies, s) {
				f["strategies"] = "each must be one of " + strings.Join(labrace.Strategies, ", ")
			}
		}
	}
	return f
}

func (l *labRoutes) info(c *gin.Context) {
	writeJSON(c, http.StatusOK, l.lab.Info())
}

func (l *labRoutes) startRace(c *gin.Context) {
	var req raceRequest
	if err := decode(c, &req, bodyRequired); err != nil {
		writeError(c, err)
		return
	}
	if !l.a.demoLogin {
		writeError(c, newError("not_found", "a lab race logs its buyers in with the demo login, which is off (SHOP_DEMO_LOGIN=false)"))
		return
	}
	v, err := l.lab.Start(c.Request.Context(), logger(c), labrace.Request{ProductID: req.ProductID, Stock: req.Stock,
		Buyers: *req.Buyers, Concurrency: req.Concurrency, Strategies: req.Strategies})
	var busy *labrace.BusyError
	switch {
	case errors.As(err, &busy):
		writeError(c, newError("busy", busy.Error()))
		return
	case errors.Is(err, labrace.ErrNoSelfURL):
		writeError(c, newError("internal", err.Error()))
		return
	case err != nil:
		writeError(c, err)
		return
	}
	c.Header("Location", "/api/v1/admin/lab/races/"+v.RaceID)
	writeJSON(c, http.StatusAccepted, v)
}

func (l *labRoutes) raceProgress(c *gin.Context) {
	v, ok := l.lab.Get(c.Param("race_id"))
	if !ok {
		writeError(c, newError("not_found", "no such race in this instance (races live in the instance that ran them; the last "+strconv.Itoa(labrace.Kept)+" are kept)"))
		return
	}
	writeJSON(c, http.StatusOK, v)
}
