package identity

import (
	"context"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// AskAfterMiss is what a lookup that found nothing cached does next: it stands for
// a lookup whose miss came just before another lookup's call about the same credential
// ended and left the flight.
func (c *Cache) AskAfterMiss(ctx context.Context, kind internalv1.CredentialKind, secret string) (Identity, error) {
	return c.ask(ctx, kind, hashOf(secret))
}
