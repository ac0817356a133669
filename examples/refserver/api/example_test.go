package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
)

// A refusal crosses the API with its csi sentinel and class, so the
// caller branches on it with errors.Is as it would in-process.
func ExampleClient() {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		err := fmt.Errorf("delete volume default/db: allocation web-1 still claims it: %w", csi.ErrVolumeInUse)
		w.WriteHeader(api.StatusOf(err))
		_ = json.NewEncoder(w).Encode(api.ErrorBody(err))
	}))
	defer hs.Close()

	c, err := api.NewClient(hs.URL, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	_, err = c.DeleteVolume(context.Background(), "default", "db")
	fmt.Println(err)
	fmt.Println(errors.Is(err, csi.ErrVolumeInUse), csi.Classify(err))
	// Output:
	// delete volume default/db: allocation web-1 still claims it: volume in use
	// true retryable
}
