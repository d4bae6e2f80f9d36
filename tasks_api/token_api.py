"""`/api/v1/tokens/`: list, create (the token is shown once), show and revoke a team's tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django.db.models import QuerySet
from django.utils import timezone
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from tasks_api import tokens
from tasks_api.models import ApiToken, Scope
from tasks_api.openapi import extend_schema
from tasks_api.policy import ApiPolicy
from tasks_api.token_serializers import (
    CreateTokenSerializer,
    NewTokenSerializer,
    TokenSerializer,
)
from tasks_api.views import _errors
from tasks_core import access
from tasks_core.models import Team

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _caller(request: Request) -> User:
    """The signed-in user: IsAuthenticated (ApiPolicy) lets no anonymous request through."""
    return cast("User", request.user)


def _team_for(request: Request, name: str | None) -> Team:
    """The team a new token belongs to: one the caller is a member of."""
    mine = Team.objects.filter(members=_caller(request)).order_by("name")
    if name is None:
        teams = list(mine[:2])
        if len(teams) != 1:
            raise serializers.ValidationError(
                {"team": ["Name the team (you are in several, or in none)."]})
        return teams[0]
    team = mine.filter(name=name).first()
    if team is None:
        raise serializers.ValidationError({"team": ["Not one of your teams."]})
    return team


@extend_schema(tags=["tokens"])
class TokenViewSet(ApiPolicy, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                   viewsets.GenericViewSet):
    """API tokens that can act on the caller's teams: filed under one, or a member's full token."""

    serializer_class = TokenSerializer
    pagination_class = None
    lookup_value_regex = "[0-9]{1,18}"

    def get_queryset(self) -> QuerySet[ApiToken]:
        return tokens.acting_on(access.Scope.of(self.request.user).team_ids)

    @extend_schema(responses={200: TokenSerializer(many=True), **_errors()})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(responses={200: TokenSerializer, **_errors(404)})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(request=CreateTokenSerializer,
                   responses={201: NewTokenSerializer, **_errors(400, 415)})
    def create(self, request: Request) -> Response:
        form = CreateTokenSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        options = form.validated_data
        issued = tokens.issue(user=_caller(request), team=_team_for(request, options.get("team")),
                              name=options["name"], scope=Scope(options["scope"]),
                              expires_at=options.get("expires_at"))
        shown = NewTokenSerializer(issued.row).data
        return Response({**shown, "token": issued.token}, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: TokenSerializer, **_errors(404)})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        row = tokens.revoke(self.get_object(), now=timezone.now())
        return Response(TokenSerializer(row).data)
