package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/openapi"
)

func (s *Server) health(c *Call) error {
	return c.JSON(http.StatusOK, map[string]bool{"ok": true})
}

func (s *Server) ready(c *Call) error {
	ctx, cancel := context.WithTimeout(c.Ctx, 2*time.Second)
	defer cancel()
	if err := s.db.Ping(ctx); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]bool{"ok": true})
}

func (s *Server) openAPI(c *Call) error {
	doc, err := openapi.Document()
	if err != nil {
		return err
	}
	c.wrote = true
	c.W.Header().Set("Content-Type", "application/json")
	_, err = c.W.Write(doc)
	return err
}

func (s *Server) docs(c *Call) error {
	page, err := openapi.Page()
	if err != nil {
		return err
	}
	c.wrote = true
	c.W.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, err = c.W.Write(page)
	return err
}
