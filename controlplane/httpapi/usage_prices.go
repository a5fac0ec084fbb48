package httpapi

import (
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/money"
)

// Model prices: the organization's catalog, integer micro-USD per million input, output
// and cached-input tokens per model. Accounting uses it to estimate a request's cost when
// the upstream reports none.

// maxModelPrices bounds one price table (and so one PUT body).
const maxModelPrices = 1000

type modelPriceView struct {
	Model                         string     `json:"model"`
	InputMicroUsdPerMillion       int64      `json:"inputMicroUsdPerMillion"`
	OutputMicroUsdPerMillion      int64      `json:"outputMicroUsdPerMillion"`
	CachedInputMicroUsdPerMillion int64      `json:"cachedInputMicroUsdPerMillion"`
	UpdatedAt                     jsonx.Time `json:"updatedAt"`
}

func viewModelPrices(ps []store.ModelPrice) map[string]any {
	out := make([]modelPriceView, len(ps))
	for i, p := range ps {
		out[i] = modelPriceView{Model: p.Model, InputMicroUsdPerMillion: p.InputPerMillion, OutputMicroUsdPerMillion: p.OutputPerMillion,
			CachedInputMicroUsdPerMillion: p.CachedInputPerMillion, UpdatedAt: jsonx.Time(p.UpdatedAt)}
	}
	return map[string]any{"prices": out}
}

func (s *Server) listModelPrices(c *Call) error {
	ps, err := store.ListModelPrices(c.Ctx, c.DB(), c.OrgID())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewModelPrices(ps))
}

// replaceModelPrices makes the table exactly the given list (models left out are
// removed). Prices are bounded like allowances, so a per-million price times any
// plausible token count is checked arithmetic for the accounting side, never a float.
func (s *Server) replaceModelPrices(c *Call) error {
	var in struct {
		Prices []struct {
			Model       *string `json:"model"`
			Input       *int64  `json:"inputMicroUsdPerMillion"`
			Output      *int64  `json:"outputMicroUsdPerMillion"`
			CachedInput *int64  `json:"cachedInputMicroUsdPerMillion"`
		} `json:"prices"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	if in.Prices == nil {
		p.Add("is required", "prices")
	} else if len(in.Prices) > maxModelPrices {
		p.Add("must have at most 1000 items", "prices")
	}
	seen := map[string]bool{}
	ps := make([]store.ModelPrice, 0, len(in.Prices))
	for i, e := range in.Prices {
		mp := store.ModelPrice{Model: trimmedText(&p, e.Model, 1, 200, "prices", i, "model")}
		if mp.Model != "" && seen[mp.Model] {
			p.Add("repeats a model; each model may have one price", "prices", i, "model")
		}
		seen[mp.Model] = true
		for _, f := range []struct {
			v    *int64
			dst  *int64
			name string
		}{{e.Input, &mp.InputPerMillion, "inputMicroUsdPerMillion"}, {e.Output, &mp.OutputPerMillion, "outputMicroUsdPerMillion"},
			{e.CachedInput, &mp.CachedInputPerMillion, "cachedInputMicroUsdPerMillion"}} {
			switch {
			case f.v == nil:
				p.Add("is required", "prices", i, f.name)
			case *f.v < 0 || *f.v > money.MaxAllowanceMicroUSD:
				p.Add("must be an integer from 0 to 4503599627370495", "prices", i, f.name)
			default:
				*f.dst = *f.v
			}
		}
		ps = append(ps, mp)
	}
	if err := p.Err(); err != nil {
		return err
	}
	var out []store.ModelPrice
	err := c.Tx(func(tx pgx.Tx) error {
		if err := store.ReplaceModelPrices(c.Ctx, tx, c.OrgID(), ps, c.now); err != nil {
			return err
		}
		if err := c.Audit(tx, "model_prices.replace", c.OrgID(), map[string]any{"models": len(ps)}); err != nil {
			return err
		}
		var err error
		out, err = store.ListModelPrices(c.Ctx, tx, c.OrgID())
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewModelPrices(out))
}
