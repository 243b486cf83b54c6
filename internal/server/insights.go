package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/insights"
)

// InsightsService answers the insights in a request's tenant or
// department (insights.Service meets it).
type InsightsService interface {
	Efficiency(ctx context.Context, r insights.Request, params *insights.IdleParams) (insights.EfficiencyReport, error)
	RightSize(ctx context.Context, r insights.Request) (insights.RightSizeReport, error)
	Stored(ctx context.Context, r insights.Request) ([]insights.StoredAnomaly, error)
	Capacity(ctx context.Context, r insights.CapacityRequest) ([]insights.CapacityForecast, error)
}

// maxAnomalyRange bounds a listing of stored anomalies.
const maxAnomalyRange = 400 * 24 * time.Hour

// parseInsightsRequest reads month, or from and to, and tenant, in the
// caller's scope, which travels to the store's SQL: a tenant key sees its
// own tenant only (another is not found), a department key the rows
// labelled with its department, as in /v1/usage.
func parseInsightsRequest(v url.Values, scope auth.Scope, maxRange time.Duration) (insights.Request, error) {
	var r insights.Request
	if err := onlyParams(v, 128, "month", "from", "to", "tenant"); err != nil {
		return r, err
	}
	month, from, to := v.Get("month"), v.Get("from"), v.Get("to")
	switch {
	case month != "" && (from != "" || to != ""):
		return r, badRequest{"give month or from and to, not both"}
	case month != "":
		p, err := billing.MonthlyPeriod(month, time.UTC)
		if err != nil {
			return r, badRequest{"month: " + err.Error()}
		}
		r.From, r.To = p.Start, p.End
	default:
		var err error
		if r.From, err = parseTime("from", from, time.UTC); err != nil {
			return r, err
		}
		if r.To, err = parseTime("to", to, time.UTC); err != nil {
			return r, err
		}
	}
	r.From, r.To = r.From.UTC(), r.To.UTC()
	switch {
	case !r.To.After(r.From):
		return r, badRequest{"to: must be after from"}
	case r.To.Sub(r.From) > maxRange:
		return r, badRequest{fmt.Sprintf("from..to spans %s; at most %d days per request", r.To.Sub(r.From).Round(time.Hour), int(maxRange.Hours()/24))}
	case r.From.Year() < 1971 || r.To.Year() > 2105:
		return r, badRequest{"from/to: outside 1971..2105"}
	case !r.From.Equal(r.From.Truncate(time.Hour)) || !r.To.Equal(r.To.Truncate(time.Hour)):
		return r, badRequest{"from/to: must be whole UTC hours"}
	}
	r.Tenant, r.Scope = v.Get("tenant"), scope
	if t := scope.Tenant(); t != "" && r.Tenant != "" && r.Tenant != t {
		return r, fault.NotFoundf("tenant %q: not found", truncate(r.Tenant, 64))
	}
	return r, nil
}

// periodRequest parses an insights period within maxRange.
func periodRequest(maxRange time.Duration) func(url.Values, auth.Scope) (insights.Request, error) {
	return func(v url.Values, scope auth.Scope) (insights.Request, error) {
		return parseInsightsRequest(v, scope, maxRange)
	}
}

func (s *Server) getEfficiency(svc InsightsService) gin.HandlerFunc {
	return insightsRoute(s, svc, nil, periodRequest(insights.MaxPeriod), func(ctx context.Context, r insights.Request) (any, error) {
		return svc.Efficiency(ctx, r, nil)
	})
}

func (s *Server) getRightSize(svc InsightsService) gin.HandlerFunc {
	return insightsRoute(s, svc, nil, periodRequest(insights.MaxPeriod), func(ctx context.Context, r insights.Request) (any, error) {
		return svc.RightSize(ctx, r)
	})
}

func (s *Server) getAnomalies(svc InsightsService) gin.HandlerFunc {
	// Stored anomalies carry no department to check a tenant against.
	tenantOrAdmin := func(scope auth.Scope) error {
		if scope.Kind == auth.KindDepartment {
			return fmt.Errorf("anomalies are listed per tenant: use a tenant or an admin key: %w", ErrForbidden)
		}
		return nil
	}
	return insightsRoute(s, svc, tenantOrAdmin, periodRequest(maxAnomalyRange), func(ctx context.Context, r insights.Request) (any, error) {
		as, err := svc.Stored(ctx, r)
		if err != nil {
			return nil, err
		}
		if as == nil {
			as = []insights.StoredAnomaly{}
		}
		return gin.H{"from": r.From, "to": r.To, "anomalies": as}, nil
	})
}

func (s *Server) getCapacity(svc InsightsService, now func() time.Time) gin.HandlerFunc {
	// The fleet's capacity is nobody's data but the operator's.
	adminOnly := func(scope auth.Scope) error {
		if scope.Kind != auth.KindAdmin {
			return fmt.Errorf("fleet capacity is for admin keys: %w", ErrForbidden)
		}
		return nil
	}
	parse := func(v url.Values, scope auth.Scope) (insights.CapacityRequest, error) {
		r, err := parseCapacityRequest(v, now())
		r.Scope = scope
		return r, err
	}
	return insightsRoute(s, svc, adminOnly, parse, func(ctx context.Context, r insights.CapacityRequest) (any, error) {
		fc, err := svc.Capacity(ctx, r)
		if err != nil {
			return nil, err
		}
		if fc == nil {
			fc = []insights.CapacityForecast{}
		}
		return gin.H{"models": fc}, nil
	})
}

// parseCapacityRequest reads to, until, weeks and target, with the CLI's
// defaults: to the current hour, until 90 days after to, 8 weeks, 0.9.
func parseCapacityRequest(v url.Values, now time.Time) (insights.CapacityRequest, error) {
	r := insights.CapacityRequest{To: now.UTC().Truncate(time.Hour), Weeks: insights.DefaultCapacityWeeks,
		Target: decimal.RequireFromString(insights.DefaultCapacityTarget)}
	if err := onlyParams(v, 64, "to", "until", "weeks", "target"); err != nil {
		return r, err
	}
	var err error
	if t := v.Get("to"); t != "" {
		if r.To, err = parseTime("to", t, time.UTC); err != nil {
			return r, err
		}
	}
	hourInRange := func(name string, t time.Time) error {
		switch {
		case t.Year() < 1971 || t.Year() > 2105: // what ClickHouse's DateTime holds
			return badRequest{name + ": outside 1971..2105"}
		case !t.Equal(t.Truncate(time.Hour)):
			return badRequest{name + ": must be a whole UTC hour"}
		}
		return nil
	}
	// to is checked before the default until is taken from it, so an error
	// names the parameter the caller gave.
	r.To = r.To.UTC()
	if err := hourInRange("to", r.To); err != nil {
		return r, err
	}
	r.Until = r.To.Add(insights.DefaultCapacityHorizon)
	untilName := "until (default: 90 days after to)"
	if t := v.Get("until"); t != "" {
		if r.Until, err = parseTime("until", t, time.UTC); err != nil {
			return r, err
		}
		untilName = "until"
	}
	r.Until = r.Until.UTC()
	if err := hourInRange(untilName, r.Until); err != nil {
		return r, err
	}
	if w := v.Get("weeks"); w != "" {
		if r.Weeks, err = strconv.Atoi(w); err != nil {
			return r, badRequest{fmt.Sprintf("weeks %q: not a whole number", truncate(w, 16))}
		}
	}
	if t := v.Get("target"); t != "" {
		if r.Target, err = decimal.NewFromString(t); err != nil {
			return r, badRequest{fmt.Sprintf("target %q: not a number", truncate(t, 16))}
		}
	}
	// The service's own checks, before it is called: until after to and
	// at most three years on, weeks 2..52, target within (0, 1].
	return r, r.Validate()
}

// insightsRoute answers an insights route: 404 where no service is wired,
// the scope checked (allowed, when given), the request parsed, then run's
// answer as JSON.
func insightsRoute[R any](s *Server, svc InsightsService, allowed func(auth.Scope) error,
	parse func(url.Values, auth.Scope) (R, error), run func(context.Context, R) (any, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		if svc == nil {
			writeError(c, http.StatusNotFound, "not_found", "insights are not served here")
			return
		}
		scope := scopeOf(c)
		if allowed != nil {
			if err := allowed(scope); err != nil {
				s.respondError(c, err)
				return
			}
		}
		r, err := parse(c.Request.URL.Query(), scope)
		if err != nil {
			s.respondError(c, err)
			return
		}
		rep, err := run(c.Request.Context(), r)
		if err != nil {
			s.respondError(c, err)
			return
		}
		c.JSON(http.StatusOK, rep)
	}
}
